package main

/*
#include <stdlib.h>

// kbundle_transport is point-to-point bytes between the processes of a
// job that the caller provides (the Python package: a torch.distributed
// gloo group's send and recv): rank and size in it, and functions that
// return 0 on success; on failure, error copies a message into buf.
typedef int (*kbundle_xfer_fn)(long long handle, void *buf, long long len, int peer, int tag);
typedef long long (*kbundle_error_fn)(long long handle, char *buf, long long cap);
typedef struct {
	long long handle;
	int rank;
	int size;
	kbundle_xfer_fn send;
	kbundle_xfer_fn recv;
	kbundle_error_fn error;
} kbundle_transport;

static int kb_send(const kbundle_transport *t, void *buf, long long len, int peer, int tag) {
	return t->send(t->handle, buf, len, peer, tag);
}
static int kb_recv(const kbundle_transport *t, void *buf, long long len, int peer, int tag) {
	return t->recv(t->handle, buf, len, peer, tag);
}
static long long kb_error(const kbundle_transport *t, char *buf, long long cap) {
	return t->error(t->handle, buf, cap);
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"unsafe"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/detect"
)

// transport is a kbundle_transport as broadcast.Transport.
type transport struct{ t *C.kbundle_transport }

func (t transport) xfer(send bool, buf []byte, peer, tag int) error {
	var p unsafe.Pointer
	if len(buf) > 0 {
		p = unsafe.Pointer(&buf[0])
	}
	var rc C.int
	if send {
		rc = C.kb_send(t.t, p, C.longlong(len(buf)), C.int(peer), C.int(tag))
	} else {
		rc = C.kb_recv(t.t, p, C.longlong(len(buf)), C.int(peer), C.int(tag))
	}
	if rc == 0 {
		return nil
	}
	msg := make([]byte, 1024)
	n := C.kb_error(t.t, (*C.char)(unsafe.Pointer(&msg[0])), C.longlong(len(msg)))
	if n <= 0 || int(n) > len(msg) {
		return errors.New("the process group's send or recv failed")
	}
	return errors.New(string(msg[:n]))
}

func (t transport) Send(buf []byte, dest, tag int) error { return t.xfer(true, buf, dest, tag) }
func (t transport) Recv(buf []byte, src, tag int) error  { return t.xfer(false, buf, src, tag) }

// world is the communicator over t: the node facts are this host's name
// and the launcher's local rank in the request's environment (torchrun's
// LOCAL_RANK), which SplitShared checks against each other.
func world(t *C.kbundle_transport, environ map[string]string) broadcast.NodeComm {
	host, _ := os.Hostname()
	local := -1
	if det, err := detect.Detect(func(k string) (string, bool) { v, ok := environ[k]; return v, ok }); err == nil && det.LocalRank >= 0 {
		local = det.LocalRank
	}
	return broadcast.FromTransport(transport{t}, int(t.rank), int(t.size), host, local)
}

// exitJob is the timeout's end of a call over a transport: there is no
// MPI_Abort, so this process exits, and the launcher (torchrun's agent)
// ends the other workers.
func exitJob(msg string) {
	fmt.Fprintf(os.Stderr, "kbundle: %s\n", msg)
	os.Exit(exitError)
}

// onTerm removes what the call has written so far (bundle.RemoveTemps)
// when SIGTERM comes during it, then ends the process with SIGTERM as it
// would have: torchrun's agent ends the other workers that way when one
// fails, and the node must not keep a half-extracted staging tree. The
// handler is the call's only; stop restores the caller's.
func onTerm() (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
			bundle.RemoveTemps()
			signal.Reset(syscall.SIGTERM)
			syscall.Kill(os.Getpid(), syscall.SIGTERM)
		case <-done:
		}
	}()
	return func() { signal.Stop(ch); close(done) }
}

//export kbundle_load_transport
func kbundle_load_transport(t *C.kbundle_transport, request *C.char) *C.char {
	return C.CString(string(loadTransport(context.Background(), t, []byte(C.GoString(request)))))
}

//export kbundle_harvest_transport
func kbundle_harvest_transport(t *C.kbundle_transport, request *C.char) *C.char {
	return C.CString(string(harvestTransport(context.Background(), t, []byte(C.GoString(request)))))
}

// loadTransport is kbundle_load over a caller's transport instead of an
// MPI communicator: the same load (loadcmd.Load, load.Run), with no MPI
// call at all, so a library built without MPI does it.
func loadTransport(ctx context.Context, t *C.kbundle_transport, req []byte) []byte {
	r, err := loadcmd.Decode(req)
	if err != nil {
		return encode(loadcmd.Failure(loadcmd.Python, err))
	}
	rank := int(t.rank)
	opts, local := loadcmd.Resolve(r, loadcmd.Python, rank)
	probeInProcess(&opts)
	host, _ := os.Hostname()
	defer loadcmd.Guard(loadcmd.Python, opts.Timeout, rank, host, exitJob)()
	defer onTerm()()
	return encode(loadcmd.Load(ctx, world(t, r.Environ), loadcmd.Python, opts, local, true, false))
}

// harvestTransport is kbundle_harvest over a caller's transport.
func harvestTransport(ctx context.Context, t *C.kbundle_transport, req []byte) []byte {
	r, err := loadcmd.DecodeHarvest(req)
	if err != nil {
		return encode(loadcmd.HarvestFailure(loadcmd.Python, err))
	}
	rank := int(t.rank)
	opts, local := loadcmd.ResolveHarvest(r, loadcmd.Python, rank)
	probeInProcess(&opts)
	host, _ := os.Hostname()
	defer loadcmd.HarvestGuard(loadcmd.Python, opts.Timeout, rank, host, exitJob)()
	defer onTerm()()
	return encode(loadcmd.Harvest(ctx, world(t, r.Environ), loadcmd.Python, opts, local, true))
}
