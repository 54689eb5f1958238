package app

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Data dir permissions. Everything in the data dir is root's: moat.db holds
// every envd access token and sandbox envVars, templates may carry what
// their build steps baked in, disks and VM state hold sandbox data. The
// host IDs sandboxes run as (package idmap) and every other account get
// execute-only traversal where something unprivileged must pass through,
// and nothing else:
//
//	<data>            0711  a sandbox's root reaches <data>/sandboxes/<id>
//	sandboxes         0711  same; each <id> is 0700, owned by that sandbox's root
//	templates, cache  0711  template builds run apt as _apt in work dirs below
//	templates/<name>  0711  same; its rootfs is 0700 (the sandboxes see it
//	                        through an idmapped mount made by root, not by path)
//	anything else     0700 dirs, owner-only files (disks, vm, moat.db, serve.lock)
var traverseOnly = map[string]bool{"sandboxes": true, "templates": true, "cache": true}

// SecureDataDir applies the permissions above to dataDir and its children,
// creating dataDir if needed; it fixes what an older version left open.
func SecureDataDir(dataDir string) error {
	if err := os.MkdirAll(dataDir, 0o711); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if err := chmodIf(dataDir, 0o711); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	ents, err := os.ReadDir(dataDir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	var errs []error
	for _, e := range ents {
		p := filepath.Join(dataDir, e.Name())
		switch {
		case e.IsDir() && traverseOnly[e.Name()]:
			errs = append(errs, chmodIf(p, 0o711))
		case e.IsDir():
			errs = append(errs, chmodIf(p, 0o700))
		case e.Type().IsRegular():
			errs = append(errs, ownerOnly(p))
		}
	}
	errs = append(errs, secureTemplates(filepath.Join(dataDir, "templates")))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("data dir permissions: %w", err)
	}
	return nil
}

// secureTemplates makes each template dir traversable only, its rootfs
// root-only and its files (build log, stamp) owner-only.
func secureTemplates(dir string) error {
	names, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		if !n.IsDir() {
			continue
		}
		tdir := filepath.Join(dir, n.Name())
		errs = append(errs, chmodIf(tdir, 0o711))
		ents, err := os.ReadDir(tdir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range ents {
			p := filepath.Join(tdir, e.Name())
			switch {
			case e.IsDir() && e.Name() == "rootfs":
				errs = append(errs, chmodIf(p, 0o700))
			case e.Type().IsRegular():
				errs = append(errs, ownerOnly(p))
			}
		}
	}
	return errors.Join(errs...)
}

// chmodIf sets p's permission bits to mode unless they already are.
func chmodIf(p string, mode fs.FileMode) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.Mode().Perm() == mode {
		return nil
	}
	return os.Chmod(p, mode)
}

// ownerOnly clears a file's group and other permission bits.
func ownerOnly(p string) error {
	fi, err := os.Lstat(p)
	if err != nil || fi.Mode().Perm()&0o077 == 0 {
		return err
	}
	return os.Chmod(p, fi.Mode().Perm()&0o700)
}
