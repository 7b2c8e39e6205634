package broadcast

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/readahead"
)

// A Sink receives a streamed bundle on one rank: Begin gets the prelude
// (header, index and trailer: what a reader needs before the content),
// then Write gets the body in file order. Once Begin or a Write has
// failed, the sink gets no more writes (the rank still takes part in the
// broadcast to its end); the failure is reported by that error, and the
// ranks then agree on it.
type Sink interface {
	Begin(prelude []byte, size int64, digest bundle.Digest) error
	Write(p []byte) (int, error)
}

// Stream broadcasts a bundle from rank 0 of comm to every rank, in the
// streaming wire format of docs/WIRE.md; it is collective. Rank 0 passes
// the opened bundle src, or the error that kept it from opening one (then
// every rank returns the same *Error matching ErrNoBundle, and no byte
// follows). Rank 0 reads the body in chunks, reading the next while the
// previous is broadcast, and passes every chunk to its own sink too; every
// rank hands what it receives to its sink (nil: receive and discard).
//
// It returns the local error of this rank (its sink's, or rank 0's read
// error; the caller agrees on it) and the error of the collective itself:
// the *Error of a failure rank 0 announced, or one matching ErrComm.
func Stream(comm Comm, src *bundle.Reader, srcErr error, chunk int64, sink Sink, st *Stats) (local, err error) {
	if err := valid(comm); err != nil {
		return nil, err
	}
	if st == nil {
		st = new(Stats)
	}
	t := time.Now()
	msg, prelude := make([]byte, StatusLen), []byte(nil)
	if comm.Rank() == 0 {
		msg, prelude = Announce(src, srcErr, chunk)
		st.Read += time.Since(t)
	}
	if err := comm.Bcast(msg, 0); err != nil {
		return nil, commErr("status broadcast", err)
	}
	st.Bcast += time.Since(t)
	return StreamAnnounced(comm, msg, src, prelude, sink, st)
}

// StatusLen is the length of a stream's status (docs/WIRE.md, "Sequence",
// step 1).
const StatusLen = statusLen

// Announce returns the status of a stream of src that rank 0 broadcasts
// first (docs/WIRE.md, "Sequence", step 1; StatusLen bytes), and the prelude it
// sends next, for a caller that sends the status in a broadcast of its
// own, with what else rank 0 has to say then, before StreamAnnounced: a
// round trip less (issue 31). srcErr, or a failure to read the prelude,
// makes it a failure status; chunk is Stream's.
func Announce(src *bundle.Reader, srcErr error, chunk int64) (msg, prelude []byte) {
	if chunk <= 0 {
		chunk = DefaultChunkSize
	}
	chunk = min(chunk, MaxChunkSize)
	if srcErr == nil && src == nil {
		srcErr = errors.New("broadcast: no bundle given to rank 0")
	}
	if srcErr == nil {
		prelude, srcErr = src.Prelude()
	}
	if srcErr != nil {
		return failure(fmt.Errorf("%w: %w", ErrNoBundle, srcErr), 0, 1).encode(), nil
	}
	return (&status{chunk: chunk, size: src.Size(), prelude: int64(len(prelude)), digest: src.FileDigest()}).encode(), prelude
}

// StreamAnnounced is Stream after its status: msg is the status every
// rank of comm got from rank 0 (Announce's there), and rank 0 must pass
// the bundle src it announced and Announce's prelude (another src, or
// none, with a success status is the caller's bug: rank 0 panics, or the
// receivers' digests fail). It returns as Stream does; a failure status
// is rank 0's announced failure.
func StreamAnnounced(comm Comm, msg []byte, src *bundle.Reader, prelude []byte, sink Sink, st *Stats) (local, err error) {
	if err := valid(comm); err != nil {
		return nil, err
	}
	if st == nil {
		st = new(Stats)
	}
	t := time.Now()
	rank := comm.Rank()
	head, err := decodeStatus(msg)
	if err != nil {
		return nil, err
	}
	if head.failed {
		return nil, head.err()
	}
	st.Size = head.size
	if rank != 0 {
		if head.prelude > head.size || head.prelude > bundle.MaxIndexLen+64 {
			return nil, fmt.Errorf("%w: prelude of %d bytes", ErrStatus, head.prelude)
		}
	}
	if head.size <= head.chunk {
		local, err = sendWhole(comm, src, head, prelude, sink, st)
		st.Bcast += time.Since(t)
		return local, err
	}
	if rank != 0 {
		prelude = make([]byte, head.prelude)
	}
	for off := int64(0); off < head.prelude; off += head.chunk {
		if err := comm.Bcast(prelude[off:min(off+head.chunk, head.prelude)], 0); err != nil {
			return nil, commErr("prelude broadcast", err)
		}
	}
	if sink != nil {
		local = sink.Begin(prelude, head.size, head.digest)
	}
	body := head.size - head.prelude
	if rank == 0 {
		err = sendBody(comm, src, body, head.chunk, sink, st, &local)
	} else {
		err = receiveBody(comm, body, head.chunk, sink, st, &local)
	}
	st.Bcast += time.Since(t)
	return local, err
}

// valid checks comm's rank and size.
func valid(comm Comm) error {
	if comm == nil {
		return errors.New("broadcast: nil communicator")
	}
	if rank, size := comm.Rank(), comm.Size(); size < 1 || rank < 0 || rank >= size {
		return fmt.Errorf("broadcast: rank %d of %d: not a valid communicator", rank, size)
	}
	return nil
}

// write hands p to sink, remembering its first error in local. After a
// failure (of Begin too) the sink gets nothing more: the rank only takes
// part in the broadcast until the end.
func write(sink Sink, p []byte, local *error) {
	if sink == nil || *local != nil {
		return
	}
	if _, err := sink.Write(p); err != nil && *local == nil {
		*local = err
	}
}

// sendBody is rank 0's part: chunk k+1 is read while chunk k is
// broadcast. A read error is remembered in local and the rest is sent as
// zeros: the broadcast must complete on every rank, and the receivers'
// digest checks fail.
func sendBody(comm Comm, src *bundle.Reader, n, chunk int64, sink Sink, st *Stats, local *error) error {
	return readahead.Each(context.Background(), src.ReaderAt(), src.BodyStart(), n, chunk, func(p readahead.Piece) error {
		st.Read += p.Took
		if p.Err != nil && *local == nil {
			*local = readError(p.Off, p.Err)
		}
		if err := comm.Bcast(p.P, 0); err != nil {
			return commErr(fmt.Sprintf("bundle broadcast at byte %d", p.Off), err)
		}
		st.Chunks++
		write(sink, p.P, local)
		return nil
	})
}

// readError is rank 0's failure to read its bundle at byte off.
func readError(off int64, err error) error {
	return fmt.Errorf("%w: reading at byte %d: %w", ErrNoBundle, off, err)
}

// sendWhole sends a bundle no longer than a chunk in one broadcast, its
// prelude then its body, not one broadcast each: a small set's load
// takes a round trip less a stream (issue 31). A read error on rank 0 is
// as sendBody's.
func sendWhole(comm Comm, src *bundle.Reader, head *status, prelude []byte, sink Sink, st *Stats) (local, err error) {
	buf := make([]byte, head.size)
	var readErr error
	if comm.Rank() == 0 {
		t := time.Now()
		copy(buf, prelude)
		body := buf[head.prelude:]
		if n, err := src.ReaderAt().ReadAt(body, src.BodyStart()); n < len(body) {
			readErr = readError(src.BodyStart()+int64(n), err)
			clear(body[n:])
		}
		st.Read += time.Since(t)
	}
	if err := comm.Bcast(buf, 0); err != nil {
		return nil, commErr("bundle broadcast", err)
	}
	st.Chunks++
	if sink != nil { // a copy: the sink keeps its prelude, not the body behind it
		local = sink.Begin(slices.Clone(buf[:head.prelude]), head.size, head.digest)
	}
	if local == nil {
		local = readErr
	}
	if head.size > head.prelude {
		write(sink, buf[head.prelude:], &local)
	}
	return local, nil
}

// receiveBody is every other rank's part.
func receiveBody(comm Comm, n, chunk int64, sink Sink, st *Stats, local *error) error {
	buf := make([]byte, min(chunk, n))
	for off := int64(0); off < n; off += chunk {
		b := buf[:min(chunk, n-off)]
		if err := comm.Bcast(b, 0); err != nil {
			return commErr(fmt.Sprintf("bundle broadcast at byte %d", off), err)
		}
		st.Chunks++
		write(sink, b, local)
	}
	return nil
}

// memorySink keeps the whole bundle in memory (LoadBundle).
type memorySink struct {
	b    []byte
	n    int64 // bytes of the body so far
	tail []byte
}

func (m *memorySink) Begin(prelude []byte, size int64, _ bundle.Digest) error {
	if size > int64(int(^uint(0)>>1)) {
		return fmt.Errorf("%w: bundle of %d bytes does not fit in memory", ErrNoBundle, size)
	}
	if len(prelude) < bundle.MinPrelude || int64(len(prelude)) > size {
		return fmt.Errorf("%w: prelude of %d bytes in a bundle of %d", ErrStatus, len(prelude), size)
	}
	const header = 16
	m.b = make([]byte, size)
	copy(m.b, prelude[:header])
	m.tail = prelude[header:]
	copy(m.b[size-int64(len(m.tail)):], m.tail)
	m.n = header
	return nil
}

func (m *memorySink) Write(p []byte) (int, error) {
	if m.b == nil || m.n+int64(len(p)) > int64(len(m.b)-len(m.tail)) {
		return len(p), nil
	}
	copy(m.b[m.n:], p)
	m.n += int64(len(p))
	return len(p), nil
}
