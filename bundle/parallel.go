package bundle

import (
	"context"
	"io"
	"runtime"
	"sync"
)

// blob is one distinct content and the entries that hold it.
type blob struct {
	off, size int64
	digest    Digest
	entries   []int
}

// job is a unit of parallel work: either the blobs lying wholly inside one
// segment (decoded once), or one blob spanning several segments (streamed).
type job struct {
	seg   int
	small []*blob
	large *blob
}

// plan groups the bundle's non-empty blobs into jobs, in data order.
func (r *Reader) plan() []job {
	byOff := map[int64]*blob{}
	var order []*blob
	for i := range r.ix.entries {
		e := &r.ix.entries[i]
		if e.Dir || e.Size == 0 {
			continue
		}
		b := byOff[e.offset]
		if b == nil {
			b = &blob{off: e.offset, size: e.Size, digest: e.Digest}
			byOff[e.offset] = b
			order = append(order, b)
		}
		b.entries = append(b.entries, i)
	}
	segOf := func(o int64) int { return int(o / r.ix.segSize) }
	jobs := []job{}
	bySeg := map[int]int{} // segment → index in jobs
	for _, b := range order {
		first, last := segOf(b.off), segOf(b.off+b.size-1)
		if first != last {
			jobs = append(jobs, job{seg: -1, large: b})
			continue
		}
		k, ok := bySeg[first]
		if !ok {
			k = len(jobs)
			bySeg[first] = k
			jobs = append(jobs, job{seg: first})
		}
		jobs[k].small = append(jobs[k].small, b)
	}
	return jobs
}

// forEachBlob runs small on every blob that lies in one segment (with its
// bytes, digest not yet checked) and large on every other blob (with a
// reader that checks the digest at EOF), on up to workers goroutines. The
// first error stops the rest and is returned.
func (r *Reader) forEachBlob(ctx context.Context, workers int,
	small func(b *blob, data []byte) error,
	large func(b *blob, rd io.Reader) error,
	progress func(n int64)) error {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs := r.plan()
	next := make(chan job)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for j := range next {
				if err := r.doJob(j, &buf, small, large, progress); err != nil {
					cancel(err)
				}
			}
			putBuf(buf)
		}()
	}
feed:
	for _, j := range jobs {
		select {
		case next <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && err != context.Canceled {
		return err
	}
	return ctx.Err()
}

func (r *Reader) doJob(j job, buf *[]byte,
	small func(b *blob, data []byte) error,
	large func(b *blob, rd io.Reader) error,
	progress func(n int64)) error {
	if j.large != nil {
		b := j.large
		e := r.entry(b.entries[0])
		br := r.openBlob(e)
		br.private = true
		br.ownIdx = -1
		if err := large(b, br); err != nil {
			return err
		}
		if progress != nil {
			progress(b.size)
		}
		return nil
	}
	if *buf == nil {
		*buf = getBuf(r.ix.segSize)
	}
	data, err := r.segment(j.seg, *buf)
	if err != nil {
		return err
	}
	*buf = data
	base := int64(j.seg) * r.ix.segSize
	var done int64
	for _, b := range j.small {
		if err := small(b, data[b.off-base:b.off-base+b.size]); err != nil {
			return err
		}
		done += b.size
	}
	if progress != nil {
		progress(done)
	}
	return nil
}

// checkBlob compares a small blob's bytes with its digest.
func (r *Reader) checkBlob(b *blob, data []byte) error {
	if sum(data) != b.digest {
		return r.errorf(&Error{Entry: r.entry(b.entries[0]).Name, Err: ErrChecksum, Msg: "content does not match its digest"})
	}
	return nil
}

// Verify checks the whole-file digest and then every content digest, in
// parallel on up to jobs goroutines (0: all cores).
func (r *Reader) Verify(ctx context.Context, jobs int) error {
	return r.VerifyProgress(ctx, jobs, nil)
}

// VerifyProgress is Verify reporting the bytes of content checked so far.
func (r *Reader) VerifyProgress(ctx context.Context, jobs int, progress func(n int64)) error {
	if err := r.VerifyFileDigest(); err != nil {
		return err
	}
	return r.forEachBlob(ctx, jobs, r.checkBlob,
		func(_ *blob, rd io.Reader) error { _, err := io.Copy(io.Discard, rd); return err },
		progress)
}
