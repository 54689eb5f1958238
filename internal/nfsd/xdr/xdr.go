// Package xdr reads and writes the subset of XDR (RFC 4506) that ONC RPC,
// NFSv3 and its MOUNT protocol use: 32- and 64-bit integers, booleans and
// variable-length opaque data and strings, all big-endian and padded to
// four bytes.
//
// It exists apart from package nfsd because the server's procedures and
// its tests' client both speak it. A Reader never panics on short or
// hostile input: the first error sticks, every later read returns zero
// values, and lengths are checked against a caller's bound before anything
// is allocated.
package xdr

import (
	"encoding/binary"
	"errors"
)

// ErrShort means the input ended inside a value.
var ErrShort = errors.New("xdr: short input")

// ErrTooLong means a length field exceeded the bound given for it.
var ErrTooLong = errors.New("xdr: length over its bound")

// Reader decodes from a byte slice.
type Reader struct {
	b   []byte
	err error
}

// NewReader reads b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Err is the first error met, or nil.
func (r *Reader) Err() error { return r.err }

// Len is how many bytes are left.
func (r *Reader) Len() int { return len(r.b) }

func (r *Reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = ErrShort
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

// Uint32 reads an unsigned int.
func (r *Reader) Uint32() uint32 {
	b := r.take(4)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

// Uint64 reads an unsigned hyper.
func (r *Reader) Uint64() uint64 {
	b := r.take(8)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

// Bool reads a bool (any non-zero value is an error, as RFC 4506 says
// only 0 and 1 exist).
func (r *Reader) Bool() bool {
	v := r.Uint32()
	if v > 1 && r.err == nil {
		r.err = errors.New("xdr: bool is neither 0 nor 1")
	}
	return v == 1
}

// Fixed reads n bytes of fixed-length opaque data (and its padding).
func (r *Reader) Fixed(n int) []byte {
	b := r.take(pad(n))
	if b == nil {
		return nil
	}
	return b[:n]
}

// Opaque reads variable-length opaque data of at most max bytes. The
// result aliases the input.
func (r *Reader) Opaque(max int) []byte {
	n := r.Uint32()
	if r.err != nil {
		return nil
	}
	if int64(n) > int64(max) {
		r.err = ErrTooLong
		return nil
	}
	return r.Fixed(int(n))
}

// String reads a string of at most max bytes.
func (r *Reader) String(max int) string { return string(r.Opaque(max)) }

func pad(n int) int { return (n + 3) &^ 3 }

// Writer encodes into a growing buffer.
type Writer struct {
	b []byte
}

// NewWriter starts a buffer with capacity hint n.
func NewWriter(n int) *Writer { return &Writer{b: make([]byte, 0, n)} }

// Bytes is what was written.
func (w *Writer) Bytes() []byte { return w.b }

// Len is how many bytes were written.
func (w *Writer) Len() int { return len(w.b) }

// Truncate drops what was written after the first n bytes.
func (w *Writer) Truncate(n int) { w.b = w.b[:n] }

// Uint32 writes an unsigned int.
func (w *Writer) Uint32(v uint32) { w.b = binary.BigEndian.AppendUint32(w.b, v) }

// Uint64 writes an unsigned hyper.
func (w *Writer) Uint64(v uint64) { w.b = binary.BigEndian.AppendUint64(w.b, v) }

// Bool writes a bool.
func (w *Writer) Bool(v bool) {
	if v {
		w.Uint32(1)
	} else {
		w.Uint32(0)
	}
}

// Fixed writes fixed-length opaque data and its padding.
func (w *Writer) Fixed(b []byte) {
	w.b = append(w.b, b...)
	for i := len(b); i%4 != 0; i++ {
		w.b = append(w.b, 0)
	}
}

// Opaque writes variable-length opaque data.
func (w *Writer) Opaque(b []byte) {
	w.Uint32(uint32(len(b)))
	w.Fixed(b)
}

// String writes a string.
func (w *Writer) String(s string) { w.Opaque([]byte(s)) }

// OpaqueLen is how many bytes Opaque writes for n bytes of data.
func OpaqueLen(n int) int { return 4 + pad(n) }
