package density

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Whether microVM clones could share their template's unmodified pages:
// each sandbox's guest RAM is its own copy of the template snapshot's
// memory file, mapped shared (QEMU memory-backend-file, share=on), so
// equal pages of two sandboxes are two page-cache pages. shareSample
// compares, page by page, what is resident of a sandbox's memory file with
// the snapshot's file it was copied from: the resident pages still equal
// to the template's are what a private copy-on-write mapping of the
// template file (share=off) would have left shared.

// shareSample is the sum over the sampled microVMs, in pages.
type shareSample struct {
	vms                         int
	pageSize                    int
	size, resident, same, zero  int64 // guest RAM pages; resident in page cache; of those equal to the template; all-zero
	templateResident, tmplPages int64 // the template's memory file: resident pages, size in pages
}

// sampleSharing reads up to k microVM sandboxes' memory files.
func sampleSharing(dataDir string, ids []string, k int) (shareSample, error) {
	s := shareSample{pageSize: os.Getpagesize()}
	tmpls := map[string]bool{}
	for _, id := range ids[:min(k, len(ids))] {
		dir := filepath.Join(dataDir, "vm", "sandboxes", id)
		b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
		if err != nil {
			return s, err
		}
		var meta struct {
			Source string `json:"source"`
		}
		if err := json.Unmarshal(b, &meta); err != nil || meta.Source == "" {
			return s, fmt.Errorf("sandbox %s: no snapshot source in meta.json: %v", id, err)
		}
		tmpl := filepath.Join(meta.Source, "mem")
		if err := s.add(filepath.Join(dir, "mem"), tmpl, !tmpls[tmpl]); err != nil {
			return s, fmt.Errorf("sandbox %s: %w", id, err)
		}
		tmpls[tmpl] = true
		s.vms++
	}
	return s, nil
}

// add compares one sandbox memory file with its template's; countTmpl
// adds the template file's residency (once per template file).
func (s *shareSample) add(memPath, tmplPath string, countTmpl bool) error {
	mem, unmapMem, err := mapFile(memPath)
	if err != nil {
		return err
	}
	defer unmapMem()
	tpl, unmapTpl, err := mapFile(tmplPath)
	if err != nil {
		return err
	}
	defer unmapTpl()
	ps := s.pageSize
	// Residency first: comparing reads the template's pages in.
	tv, err := residency(tpl, ps)
	if err != nil {
		return err
	}
	mv, err := residency(mem, ps)
	if err != nil {
		return err
	}
	if countTmpl {
		s.tmplPages += int64(len(tv))
		s.templateResident += countSet(tv)
	}
	zero := make([]byte, ps)
	s.size += int64(len(mv))
	for i, r := range mv {
		if r&1 == 0 {
			continue
		}
		s.resident++
		page := mem[i*ps : (i+1)*ps]
		if bytes.Equal(page, zero) {
			s.zero++
		}
		if (i+1)*ps <= len(tpl) && bytes.Equal(page, tpl[i*ps:(i+1)*ps]) {
			s.same++
		}
	}
	return nil
}

func mapFile(path string) ([]byte, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return nil, nil, fmt.Errorf("%s: empty or unreadable: %v", path, err)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return b, func() { _ = unix.Munmap(b) }, nil
}

func residency(b []byte, ps int) ([]byte, error) {
	v := make([]byte, (len(b)+ps-1)/ps)
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&v[0])))
	if e != 0 {
		return nil, fmt.Errorf("mincore: %w", e)
	}
	return v, nil
}

func countSet(v []byte) int64 {
	var n int64
	for _, r := range v {
		n += int64(r & 1)
	}
	return n
}

// print writes the per-microVM averages in MiB.
func (s shareSample) print(w io.Writer) {
	if s.vms == 0 {
		return
	}
	mib := func(pages int64) float64 { return float64(pages) * float64(s.pageSize) / float64(s.vms) / (1 << 20) }
	fmt.Fprintf(w, "microVM guest RAM vs its template snapshot (mean of %d VMs, MiB): resident in page cache %.1f, "+
		"of it equal to the template's page %.1f (%.0f%%; all-zero %.1f), changed %.1f\n",
		s.vms, mib(s.resident), mib(s.same), 100*float64(s.same)/float64(max(s.resident, 1)), mib(s.zero), mib(s.resident-s.same))
	fmt.Fprintf(w, "  each clone holds its own copy of those equal pages (share=on of a per-sandbox file): a private "+
		"mapping of the template's file would keep one copy; template memory file resident %.1f of %.1f MiB\n",
		float64(s.templateResident*int64(s.pageSize))/(1<<20), float64(s.tmplPages*int64(s.pageSize))/(1<<20))
}
