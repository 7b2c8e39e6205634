package bundle

import (
	"cmp"
	"context"
	"io"
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

// job is a unit of parallel work: decode segment seg and handle the blobs
// wholly inside it (small), or stream one blob spanning more than two
// segments (large). A blob that crosses from segment k into k+1 belongs to
// boundary k and is handled by whichever of jobs k and k+1 finishes
// decoding last, so no worker ever waits for another.
type job struct {
	seg   int
	small []*blob
	large *blob
}

type boundary struct {
	blobs   []*blob
	pending atomic.Int32 // jobs (k and k+1) still to decode their segment
}

// plan groups the bundle's non-empty blobs into jobs and boundaries.
func (r *Reader) plan() (jobs []job, bounds []boundary) {
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
	bounds = make([]boundary, len(r.ix.packed))
	segOf := func(o int64) int { return int(o / r.ix.segSize) }
	bySeg := map[int]int{} // segment → index in jobs
	jobFor := func(seg int) *job {
		k, ok := bySeg[seg]
		if !ok {
			k = len(jobs)
			bySeg[seg] = k
			jobs = append(jobs, job{seg: seg})
		}
		return &jobs[k]
	}
	for _, b := range order {
		first, last := segOf(b.off), segOf(b.off+b.size-1)
		switch {
		case last > first+1:
			jobs = append(jobs, job{seg: -1, large: b})
		case last == first:
			j := jobFor(first)
			j.small = append(j.small, b)
		default:
			jobFor(first)
			jobFor(last)
			bounds[first].blobs = append(bounds[first].blobs, b)
		}
	}
	for i := range bounds {
		if len(bounds[i].blobs) > 0 {
			bounds[i].pending.Store(2)
		}
	}
	return jobs, bounds
}

// segData holds decoded segments until every user released them.
type segData struct {
	data [][]byte
	refs []atomic.Int32
}

func (s *segData) release(i int) {
	if s.refs[i].Add(-1) == 0 {
		putBuf(s.data[i])
		s.data[i] = nil
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
	workers = Jobs(workers)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs, bounds := r.plan()
	segs := &segData{data: make([][]byte, len(bounds)), refs: make([]atomic.Int32, len(bounds))}
	for _, j := range jobs {
		if j.large == nil {
			segs.refs[j.seg].Add(1)
		}
	}
	for k := range bounds {
		if len(bounds[k].blobs) > 0 {
			segs.refs[k].Add(1)
			segs.refs[k+1].Add(1)
		}
	}
	run := &blobRun{r: r, segs: segs, bounds: bounds, small: small, large: large, progress: progress}
	lw := newLowWater(r, jobs)
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var spill []byte
			for k := range next {
				if ctx.Err() == nil {
					if err := run.do(jobs[k], &spill, lw.mover(k)); err != nil {
						cancel(err)
					}
				}
				lw.finish(k)
			}
		}()
	}
feed:
	for k := range jobs {
		lw.start(k)
		select {
		case next <- k:
		case <-ctx.Done():
			lw.finish(k)
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

// releaser is the io.ReaderAt of a Stream: it can drop the bytes that no
// job will read any more.
type releaser interface{ release(off int64) }

// lowWater tracks, for a Stream, the lowest segment that a job not yet
// finished may still read, and releases the bytes below it. Jobs are fed
// in order of their first segment; a large job moves on segment by
// segment. For other readers it does nothing.
type lowWater struct {
	mu       sync.Mutex
	r        *Reader
	rel      releaser
	inflight map[int]int // job → segment it reads next
	rest     []int       // rest[k]: lowest first segment of jobs[k:]
	fed      int
	last     int
}

func newLowWater(r *Reader, jobs []job) *lowWater {
	rel, ok := r.r.(releaser)
	if !ok {
		return nil
	}
	l := &lowWater{r: r, rel: rel, inflight: map[int]int{}, rest: make([]int, len(jobs)+1)}
	l.rest[len(jobs)] = len(r.ix.packed)
	for k := len(jobs) - 1; k >= 0; k-- {
		l.rest[k] = min(l.rest[k+1], r.firstSeg(jobs[k]))
	}
	return l
}

// firstSeg is the first segment job j reads.
func (r *Reader) firstSeg(j job) int {
	if j.large != nil {
		return int(j.large.off / r.ix.segSize)
	}
	return j.seg
}

func (l *lowWater) start(k int) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.inflight[k] = l.rest[k]
	l.fed = k + 1
	l.update()
	l.mu.Unlock()
}

func (l *lowWater) finish(k int) {
	if l == nil {
		return
	}
	l.mu.Lock()
	delete(l.inflight, k)
	l.update()
	l.mu.Unlock()
}

// mover returns the function a large job calls before it reads segment
// seg, or nil.
func (l *lowWater) mover(k int) func(seg int) {
	if l == nil {
		return nil
	}
	return func(seg int) {
		l.mu.Lock()
		l.inflight[k] = seg
		l.update()
		l.mu.Unlock()
	}
}

// update releases what lies below every unfinished job; l.mu is held.
func (l *lowWater) update() {
	low := l.rest[l.fed]
	for _, seg := range l.inflight {
		low = min(low, seg)
	}
	if low > l.last {
		l.last = low
		l.rel.release(l.r.segOff[low])
	}
}

type blobRun struct {
	r        *Reader
	segs     *segData
	bounds   []boundary
	small    func(b *blob, data []byte) error
	large    func(b *blob, rd io.Reader) error
	progress func(n int64)
}

func (br *blobRun) report(n int64) {
	if br.progress != nil && n > 0 {
		br.progress(n)
	}
}

func (br *blobRun) do(j job, spill *[]byte, onSeg func(seg int)) error {
	r := br.r
	if j.large != nil {
		b := j.large
		rd := r.openBlob(r.entry(b.entries[0]))
		rd.private = true
		rd.ownIdx = -1
		rd.onSeg = onSeg
		err := br.large(b, rd)
		putBuf(rd.own)
		if err == nil {
			br.report(b.size)
		}
		return err
	}
	data, err := r.segment(j.seg, getBuf(r.segRaw(j.seg)))
	if err != nil {
		return err
	}
	br.segs.data[j.seg] = data
	base := int64(j.seg) * r.ix.segSize
	var done int64
	for _, b := range j.small {
		if err := br.small(b, data[b.off-base:b.off-base+b.size]); err != nil {
			return err // the run stops; the garbage collector takes the buffers
		}
		done += b.size
	}
	br.report(done)
	// Boundaries on both sides: the second of their two jobs to get here
	// handles them. The atomic counter orders the other job's store of its
	// segment before this load.
	for _, k := range []int{j.seg - 1, j.seg} {
		if k < 0 || k >= len(br.bounds) || len(br.bounds[k].blobs) == 0 || br.bounds[k].pending.Add(-1) != 0 {
			continue
		}
		if err := br.boundary(k, spill); err != nil {
			return err
		}
	}
	br.segs.release(j.seg)
	return nil
}

// boundary handles the blobs crossing from segment k into k+1.
func (br *blobRun) boundary(k int, spill *[]byte) error {
	defer br.segs.release(k)
	defer br.segs.release(k + 1)
	a, b := br.segs.data[k], br.segs.data[k+1]
	base := int64(k) * br.r.ix.segSize
	var done int64
	for _, bl := range br.bounds[k].blobs {
		start := bl.off - base
		rest := bl.size - (int64(len(a)) - start)
		*spill = append(append((*spill)[:0], a[start:]...), b[:rest]...)
		if err := br.small(bl, *spill); err != nil {
			return err
		}
		done += bl.size
	}
	br.report(done)
	return nil
}

// checkBlob compares a small blob's bytes with its digest.
func (r *Reader) checkBlob(b *blob, data []byte) error {
	if sum(data) != b.digest {
		return r.errorf(&Error{Entry: r.entry(b.entries[0]).Name, Err: ErrChecksum, Msg: "content does not match its digest"})
	}
	return nil
}

// cumulative turns the increments reported by workers into ordered calls
// of progress with the running total: done grows from 0 to total, each
// call after the previous one has returned. It returns nil for a nil
// progress.
func cumulative(total int64, progress func(done, total int64)) func(n int64) {
	if progress == nil {
		return nil
	}
	var mu sync.Mutex
	var done int64
	return func(n int64) {
		if n <= 0 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		done += n
		progress(done, total)
	}
}
