package bundle

import (
	"cmp"
	"context"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// blob is one distinct content and the entries that hold it.
type blob struct {
	off, size int64
	digest    Digest
	entries   []int
}

// job is a unit of parallel work: the blobs that start in segment seg and
// end in it or the next one (small), or one blob spanning more than two
// segments (large, streamed on its own).
type job struct {
	seg   int
	small []*blob
	spill bool // some blob of small ends in segment seg+1
	large *blob
}

// plan groups the bundle's non-empty blobs into jobs, in data order, and
// counts how many jobs need each segment's decoded bytes.
func (r *Reader) plan() (jobs []job, refs []int32) {
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
	slices.SortFunc(order, func(a, b *blob) int { return cmp.Compare(a.off, b.off) })
	refs = make([]int32, len(r.ix.packed))
	segOf := func(o int64) int { return int(o / r.ix.segSize) }
	bySeg := map[int]int{} // segment → index in jobs
	for _, b := range order {
		first, last := segOf(b.off), segOf(b.off+b.size-1)
		if last > first+1 {
			jobs = append(jobs, job{seg: -1, large: b})
			continue
		}
		k, ok := bySeg[first]
		if !ok {
			k = len(jobs)
			bySeg[first] = k
			jobs = append(jobs, job{seg: first})
			refs[first]++
		}
		jobs[k].small = append(jobs[k].small, b)
		if last > first && !jobs[k].spill {
			jobs[k].spill = true
			refs[last]++
		}
	}
	return jobs, refs
}

// segFutures decode each segment once, on first demand, and free it when
// the last job that needs it is done.
type segFutures struct {
	r    *Reader
	segs []segFuture
}

type segFuture struct {
	once sync.Once
	data []byte
	err  error
	refs atomic.Int32
}

func (f *segFutures) get(i int) ([]byte, error) {
	s := &f.segs[i]
	s.once.Do(func() { s.data, s.err = f.r.segment(i, getBuf(f.r.segRaw(i))) })
	return s.data, s.err
}

func (f *segFutures) release(i int) {
	s := &f.segs[i]
	if s.refs.Add(-1) == 0 {
		putBuf(s.data)
		s.data = nil
	}
}

// forEachBlob runs small on every blob that lies in one or two segments
// (with its bytes, digest not yet checked) and large on every other blob
// (with a reader that checks the digest at EOF), on up to workers
// goroutines. Each segment is decoded once. The first error stops the rest
// and is returned.
func (r *Reader) forEachBlob(ctx context.Context, workers int,
	small func(b *blob, data []byte) error,
	large func(b *blob, rd io.Reader) error,
	progress func(n int64)) error {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs, refs := r.plan()
	fut := &segFutures{r: r, segs: make([]segFuture, len(refs))}
	for i, n := range refs {
		fut.segs[i].refs.Store(n)
	}
	next := make(chan job)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var spill []byte
			for j := range next {
				if ctx.Err() != nil {
					continue
				}
				if err := r.doJob(j, fut, &spill, small, large, progress); err != nil {
					cancel(err)
				}
			}
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

func (r *Reader) doJob(j job, fut *segFutures, spill *[]byte,
	small func(b *blob, data []byte) error,
	large func(b *blob, rd io.Reader) error,
	progress func(n int64)) error {
	if j.large != nil {
		b := j.large
		br := r.openBlob(r.entry(b.entries[0]))
		br.private = true
		br.ownIdx = -1
		err := large(b, br)
		putBuf(br.own)
		if err != nil {
			return err
		}
		if progress != nil {
			progress(b.size)
		}
		return nil
	}
	defer fut.release(j.seg)
	data, err := fut.get(j.seg)
	if err != nil {
		return err
	}
	var nextData []byte
	if j.spill {
		defer fut.release(j.seg + 1)
		if nextData, err = fut.get(j.seg + 1); err != nil {
			return err
		}
	}
	base := int64(j.seg) * r.ix.segSize
	var done int64
	for _, b := range j.small {
		start, end := b.off-base, b.off-base+b.size
		var bytes []byte
		if end <= int64(len(data)) {
			bytes = data[start:end]
		} else {
			*spill = append(append((*spill)[:0], data[start:]...), nextData[:end-int64(len(data))]...)
			bytes = *spill
		}
		if err := small(b, bytes); err != nil {
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
