package oci

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// decompress returns the tar stream of a layer blob, by its magic bytes
// (gzip, zstd or plain tar) rather than its media type, which registries
// and tools get wrong often enough.
func decompress(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return zr, nil
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(256<<20))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		return zr.IOReadCloser(), nil
	}
	return io.NopCloser(br), nil
}

// budget is the uncompressed byte allowance shared by all layers of one
// Unpack; reads fail with ErrTooLarge once it is spent.
type budget struct {
	left, max int64
}

// limitedReader charges every byte read from r to b.
type limitedReader struct {
	r io.Reader
	b *budget
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.b.left <= 0 {
		return 0, fmt.Errorf("uncompressed layers exceed %d bytes: %w", l.b.max, ErrTooLarge)
	}
	if int64(len(p)) > l.b.left {
		p = p[:l.b.left]
	}
	n, err := l.r.Read(p)
	l.b.left -= int64(n)
	l.n += int64(n)
	return n, err
}
