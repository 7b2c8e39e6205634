package bundle

import (
	"context"
	"io"
)

// VerifyOptions tune Verify. The zero value is valid.
type VerifyOptions struct {
	// Deep decodes every segment and checks every entry's content digest
	// besides the whole-file digest. Without it Verify only checks the
	// whole-file digest over the stored bytes, at the speed of reading
	// them: any damaged byte is caught, but not a bundle written wrong in
	// the first place.
	Deep bool
	// Jobs is the number of parallel workers for Deep; 0 means all cores.
	Jobs int
	// Progress, when set, is called with the bytes checked so far and the
	// total (stored bytes; with Deep, content bytes), as for Extract.
	Progress func(done, total int64)
}

// Verify checks the bundle: its whole-file digest, and with opt.Deep every
// content digest too, in parallel.
func (r *Reader) Verify(ctx context.Context, opt *VerifyOptions) error {
	if opt == nil {
		opt = &VerifyOptions{}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if !opt.Deep {
		return r.verifyFileDigest(ctx, cumulative(r.size-16, opt.Progress)) // the digest covers all but its own 16 bytes
	}
	// The whole-file digest is computed beside the content checks; its
	// error, if any, comes first (it names the likelier cause).
	fileErr := make(chan error, 1)
	go func() { fileErr <- r.verifyFileDigest(ctx, nil) }()
	err := r.forEachBlob(ctx, opt.Jobs, r.checkBlob,
		func(_ *blob, rd io.Reader) error { _, err := io.Copy(io.Discard, rd); return err },
		cumulative(r.ix.dataLen, opt.Progress))
	if ferr := <-fileErr; ferr != nil {
		return ferr
	}
	return err
}
