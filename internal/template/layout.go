package template

import "path/filepath"

// Layout names the files of templates under a data directory:
//
//	<DataDir>/templates/<name>/rootfs        the finished root filesystem
//	<DataDir>/templates/<name>/stamp.json    cache key, build ID, envd hash
//	<DataDir>/templates/<name>/build.log     output of the last mmdebstrap run
//	<DataDir>/templates/<name>/.build-XXXX   work directory of a running build
//	<DataDir>/templates/<name>/.old-XXXX     replaced rootfs kept while sandboxes use it
//	<DataDir>/cache/apt                      .deb files shared by all builds
type Layout struct {
	DataDir string
}

// TemplateDir is the directory owning everything of template name.
func (l Layout) TemplateDir(name string) string {
	return filepath.Join(l.DataDir, "templates", name)
}

// RootfsDir is where the finished root filesystem of name lives.
func (l Layout) RootfsDir(name string) string {
	return filepath.Join(l.TemplateDir(name), "rootfs")
}

// StampPath is the file recording what RootfsDir was built from.
func (l Layout) StampPath(name string) string {
	return filepath.Join(l.TemplateDir(name), "stamp.json")
}

// BuildLogPath is the full output of the last mmdebstrap run for name.
func (l Layout) BuildLogPath(name string) string {
	return filepath.Join(l.TemplateDir(name), "build.log")
}

// LockPath serialises builds of the same template.
func (l Layout) LockPath(name string) string {
	return filepath.Join(l.TemplateDir(name), ".lock")
}

// AptCacheDir holds downloaded .deb files shared between builds.
func (l Layout) AptCacheDir() string {
	return filepath.Join(l.DataDir, "cache", "apt")
}

// buildDirPattern is the os.MkdirTemp pattern of work directories.
const buildDirPattern = ".build-*"

// oldDirPattern is the os.MkdirTemp pattern of replaced rootfs trees kept
// because running sandboxes still had them as overlay lower layer.
const oldDirPattern = ".old-*"
