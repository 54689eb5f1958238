package nfsd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/moatsh/moat/internal/nfsd/export"
	"github.com/moatsh/moat/internal/nfsd/xdr"
)

// ONC RPC version 2 (RFC 5531) over TCP with record marking, as much of it
// as a Linux NFSv3 client uses: calls with AUTH_UNIX or AUTH_NULL
// credentials, accepted and denied replies with an AUTH_NULL verifier.

const (
	rpcVersion = 2
	msgCall    = 0
	msgReply   = 1

	replyAccepted = 0
	replyDenied   = 1

	acceptSuccess      = 0
	acceptProgUnavail  = 1
	acceptProgMismatch = 2
	acceptProcUnavail  = 3
	acceptGarbageArgs  = 4
	acceptSystemErr    = 5

	denyRPCMismatch = 0
	denyAuthError   = 1

	authNull = 0
	authUnix = 1

	authBadCred = 1
	authTooWeak = 5

	// maxAuth is RFC 5531's bound on a credential or verifier body.
	maxAuth = 400
	// maxGroups is AUTH_UNIX's bound on supplementary groups.
	maxGroups = 16
)

// call is one decoded RPC call.
type call struct {
	xid              uint32
	prog, vers, proc uint32
	cred             export.Cred
	args             *xdr.Reader // the procedure's arguments
	authErr          uint32      // non-zero: deny with this auth_stat
}

var errNotCall = errors.New("rpc: not a call")

// parseCall decodes a call message's header. An error means the record
// cannot be answered (no xid, or not a call at all): the connection is
// closed. A credential this server does not take is not an error: the
// call is answered with an auth error (authErr).
func parseCall(rec []byte) (*call, error) {
	r := xdr.NewReader(rec)
	c := &call{xid: r.Uint32()}
	if r.Uint32() != msgCall || r.Err() != nil {
		return nil, errNotCall
	}
	if v := r.Uint32(); v != rpcVersion {
		c.authErr = ^uint32(0) // RPC_MISMATCH, see deny
	}
	c.prog, c.vers, c.proc = r.Uint32(), r.Uint32(), r.Uint32()
	flavor := r.Uint32()
	body := r.Opaque(maxAuth)
	r.Uint32()        // verifier flavor: ignored
	r.Opaque(maxAuth) // verifier body
	if r.Err() != nil {
		return nil, fmt.Errorf("rpc: call header: %w", r.Err())
	}
	c.args = r
	switch flavor {
	case authUnix:
		cred, err := parseAuthUnix(body)
		if err != nil {
			c.authErr = authBadCred
		}
		c.cred = cred
	case authNull:
		c.cred = export.Cred{UID: export.Nobody, GID: export.Nobody}
	default:
		c.authErr = authTooWeak
	}
	return c, nil
}

// parseAuthUnix decodes an authsys_parms body.
func parseAuthUnix(b []byte) (export.Cred, error) {
	r := xdr.NewReader(b)
	r.Uint32()    // stamp
	r.Opaque(255) // machine name
	c := export.Cred{UID: r.Uint32(), GID: r.Uint32()}
	n := r.Uint32()
	if n > maxGroups {
		return export.Cred{UID: export.Nobody, GID: export.Nobody}, errors.New("rpc: too many groups")
	}
	for range n {
		c.Groups = append(c.Groups, r.Uint32())
	}
	if r.Err() != nil {
		return export.Cred{UID: export.Nobody, GID: export.Nobody}, r.Err()
	}
	return c, nil
}

// newReply starts a reply message, leaving room for its record mark
// (see frame) so that a large READ reply is never copied again.
func newReply(n int) *xdr.Writer {
	w := xdr.NewWriter(4 + n)
	w.Uint32(0)
	return w
}

// replyHeader starts an accepted reply with status stat.
func replyHeader(w *xdr.Writer, xid, stat uint32) {
	w.Uint32(xid)
	w.Uint32(msgReply)
	w.Uint32(replyAccepted)
	w.Uint32(authNull) // verifier
	w.Uint32(0)
	w.Uint32(stat)
}

// deny is a denied reply: an RPC version mismatch or an auth error.
func deny(xid, authErr uint32) []byte {
	w := newReply(32)
	w.Uint32(xid)
	w.Uint32(msgReply)
	w.Uint32(replyDenied)
	if authErr == ^uint32(0) {
		w.Uint32(denyRPCMismatch)
		w.Uint32(rpcVersion)
		w.Uint32(rpcVersion)
		return frame(w)
	}
	w.Uint32(denyAuthError)
	w.Uint32(authErr)
	return frame(w)
}

// acceptError is an accepted reply without results: the program, version
// or procedure is unknown, or the arguments did not decode.
func acceptError(xid, stat, low, high uint32) []byte {
	w := newReply(32)
	replyHeader(w, xid, stat)
	if stat == acceptProgMismatch {
		w.Uint32(low)
		w.Uint32(high)
	}
	return frame(w)
}

// readRecord reads one record-marked message of at most max bytes,
// joining its fragments.
func readRecord(r io.Reader, max int) ([]byte, error) {
	var rec []byte
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if len(rec) > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		h := binary.BigEndian.Uint32(hdr[:])
		n := int(h & 0x7fffffff)
		if len(rec)+n > max {
			return nil, fmt.Errorf("rpc: record of more than %d bytes", max)
		}
		start := len(rec)
		rec = append(rec, make([]byte, n)...)
		if _, err := io.ReadFull(r, rec[start:]); err != nil {
			return nil, fmt.Errorf("rpc: record: %w", err)
		}
		if h&0x80000000 != 0 {
			return rec, nil
		}
	}
}

// frame fills in the record mark newReply left room for: the reply is
// one last fragment.
func frame(w *xdr.Writer) []byte {
	b := w.Bytes()
	binary.BigEndian.PutUint32(b, 0x80000000|uint32(len(b)-4))
	return b
}
