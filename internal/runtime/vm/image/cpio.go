package image

import (
	"fmt"
	"io"
)

// cpioWriter writes a "newc" cpio archive, the format of Linux initramfs.
type cpioWriter struct {
	w   io.Writer
	ino uint32
	err error
}

// cpio file modes.
const (
	cpioDir  = 0o040000
	cpioReg  = 0o100000
	cpioChar = 0o020000
)

func (c *cpioWriter) header(name string, mode uint32, size int, rmaj, rmin uint32) {
	if c.err != nil {
		return
	}
	c.ino++
	nlink := 1
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	h := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, rmaj, rmin, len(name)+1, 0)
	c.write([]byte(h + name + "\x00"))
	c.pad(len(h) + len(name) + 1)
}

func (c *cpioWriter) write(b []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(b)
	}
}

func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// Dir adds a directory.
func (c *cpioWriter) Dir(name string, perm uint32) { c.header(name, cpioDir|perm, 0, 0, 0) }

// File adds a regular file with content data.
func (c *cpioWriter) File(name string, perm uint32, data []byte) {
	c.header(name, cpioReg|perm, len(data), 0, 0)
	c.write(data)
	c.pad(len(data))
}

// CharDev adds a character device node.
func (c *cpioWriter) CharDev(name string, perm, major, minor uint32) {
	c.header(name, cpioChar|perm, 0, major, minor)
}

// Close writes the trailer and returns the first error.
func (c *cpioWriter) Close() error {
	c.header("TRAILER!!!", 0, 0, 0, 0)
	if c.err != nil {
		return fmt.Errorf("cpio: %w", c.err)
	}
	return nil
}
