// Package jupyter is a client for Jupyter kernels speaking the Jupyter
// messaging protocol v5.3 over ZeroMQ: it launches a kernel from its
// kernelspec, signs and verifies every message, and streams the IOPub
// output of an execution to the caller.
package jupyter

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ProtocolVersion is the messaging protocol version written in headers.
const ProtocolVersion = "5.3"

// delimiter separates routing identities from the signed message parts.
var delimiter = []byte("<IDS|MSG>")

var (
	// ErrBadSignature is returned when a received message's HMAC does not
	// match the connection key.
	ErrBadSignature = errors.New("jupyter: invalid message signature")
	// ErrMalformed is returned for multipart frames that are not a Jupyter
	// message.
	ErrMalformed = errors.New("jupyter: malformed message")
)

// Header is a Jupyter message header.
type Header struct {
	MsgID    string `json:"msg_id"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	MsgType  string `json:"msg_type"`
	Version  string `json:"version"`
}

// Message is one decoded Jupyter message.
type Message struct {
	Identities   [][]byte
	Header       Header
	ParentHeader Header
	Metadata     map[string]any
	Content      json.RawMessage
	Buffers      [][]byte
}

// Type returns the message type from the header.
func (m Message) Type() string { return m.Header.MsgType }

// ParentID returns the msg_id of the request this message answers.
func (m Message) ParentID() string { return m.ParentHeader.MsgID }

// DecodeContent unmarshals the message content into v.
func (m Message) DecodeContent(v any) error {
	if err := json.Unmarshal(m.Content, v); err != nil {
		return fmt.Errorf("decode %s content: %w", m.Header.MsgType, err)
	}
	return nil
}

// signer computes and checks HMAC-SHA256 signatures; a nil key disables
// signing as the protocol allows.
type signer struct{ key []byte }

func (s signer) sign(parts ...[]byte) []byte {
	if len(s.key) == 0 {
		return nil
	}
	mac := hmac.New(sha256.New, s.key)
	for _, p := range parts {
		mac.Write(p)
	}
	sum := mac.Sum(nil)
	out := make([]byte, hex.EncodedLen(len(sum)))
	hex.Encode(out, sum)
	return out
}

func (s signer) verify(sig []byte, parts ...[]byte) bool {
	if len(s.key) == 0 {
		return true
	}
	return hmac.Equal(bytes.ToLower(sig), s.sign(parts...))
}

// encodeHeader renders a zero header as {} (used for empty parent headers).
func encodeHeader(h Header) ([]byte, error) {
	if h == (Header{}) {
		return []byte("{}"), nil
	}
	return json.Marshal(h)
}

// encode serialises m into signed multipart frames.
func (s signer) encode(m Message) ([][]byte, error) {
	hdr, err := encodeHeader(m.Header)
	if err != nil {
		return nil, fmt.Errorf("encode header: %w", err)
	}
	parent, err := encodeHeader(m.ParentHeader)
	if err != nil {
		return nil, fmt.Errorf("encode parent header: %w", err)
	}
	meta := m.Metadata
	if meta == nil {
		meta = map[string]any{}
	}
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("encode metadata: %w", err)
	}
	content := []byte(m.Content)
	if len(content) == 0 {
		content = []byte("{}")
	}
	frames := make([][]byte, 0, len(m.Identities)+6+len(m.Buffers))
	frames = append(frames, m.Identities...)
	frames = append(frames, delimiter, s.sign(append([][]byte{hdr, parent, metaJSON, content}, m.Buffers...)...))
	frames = append(frames, hdr, parent, metaJSON, content)
	frames = append(frames, m.Buffers...)
	return frames, nil
}

// decode parses and verifies multipart frames. A bad signature yields
// ErrBadSignature; anything structurally wrong yields ErrMalformed.
func (s signer) decode(frames [][]byte) (Message, error) {
	idx := -1
	for i, f := range frames {
		if bytes.Equal(f, delimiter) {
			idx = i
			break
		}
	}
	if idx < 0 {
		return Message{}, fmt.Errorf("%w: no <IDS|MSG> delimiter in %d frames", ErrMalformed, len(frames))
	}
	rest := frames[idx+1:]
	if len(rest) < 5 {
		return Message{}, fmt.Errorf("%w: %d frames after delimiter, want at least 5", ErrMalformed, len(rest))
	}
	sig, signed := rest[0], rest[1:]
	if !s.verify(sig, signed...) {
		return Message{}, ErrBadSignature
	}
	m := Message{Identities: frames[:idx], Content: json.RawMessage(signed[3])}
	if err := json.Unmarshal(signed[0], &m.Header); err != nil {
		return Message{}, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	if m.Header.MsgType == "" {
		return Message{}, fmt.Errorf("%w: header without msg_type", ErrMalformed)
	}
	if err := json.Unmarshal(signed[1], &m.ParentHeader); err != nil {
		return Message{}, fmt.Errorf("%w: parent header: %v", ErrMalformed, err)
	}
	if err := json.Unmarshal(signed[2], &m.Metadata); err != nil {
		return Message{}, fmt.Errorf("%w: metadata: %v", ErrMalformed, err)
	}
	if !json.Valid(signed[3]) {
		return Message{}, fmt.Errorf("%w: content is not JSON", ErrMalformed)
	}
	if len(signed) > 4 {
		m.Buffers = signed[4:]
	}
	return m, nil
}

// newID returns a random UUID-shaped identifier.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// NewID returns a random UUID string, as used for msg and kernel ids.
func NewID() string { return newID() }

// newHeader builds a request header for the given session.
func newHeader(session, msgType string) Header {
	return Header{
		MsgID:    newID(),
		Session:  session,
		Username: "moat",
		Date:     time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"),
		MsgType:  msgType,
		Version:  ProtocolVersion,
	}
}
