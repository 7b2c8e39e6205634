package main

/*
#include <stdlib.h>

// kb_probe_fn runs the toolchain probe in the caller's interpreter: the
// probe's script and its argument (NUL-terminated JSON) in, its JSON
// answer written to out (at most cap bytes); it returns the answer's
// length, or -1 when it failed, or -n when the answer needs n bytes.
typedef long long (*kb_probe_fn)(const char *script, const char *want, char *out, long long cap);

static long long kb_call_probe(kb_probe_fn f, const char *script, const char *want, char *out, long long cap) {
	return f(script, want, out, cap);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// probeFn is the caller's probe (kbundle_set_probe); nil: none, and the
// load asks a python child as the CLI does.
var probeFn atomic.Pointer[C.kb_probe_fn]

// kbundle_set_probe registers f, the Python package's in-process run of
// the toolchain probe (hostinfo.InProcess), for the loads that compare
// the caller's own interpreter; NULL removes it. The caller keeps f
// valid as long as the library is loaded.
//
//export kbundle_set_probe
func kbundle_set_probe(f C.kb_probe_fn) {
	if f == nil {
		probeFn.Store(nil)
		return
	}
	probeFn.Store(&f)
}

// probeInProcess has o read Python's versions with the registered probe,
// where there is one: the interpreter a load or harvest of the Python
// front end compares is the caller's own (sys.executable).
func probeInProcess(o interface {
	ProbeInProcess(func(script string, want []byte) ([]byte, error))
}) {
	if f := probeFn.Load(); f != nil {
		o.ProbeInProcess(callProbe(*f))
	}
}

// maxProbeAnswer bounds the probe's answer: a few dozen versions.
const maxProbeAnswer = 1 << 20

// callProbe runs the registered probe on want.
func callProbe(f C.kb_probe_fn) func(script string, want []byte) ([]byte, error) {
	return func(script string, want []byte) ([]byte, error) {
		cs, cw := C.CString(script), C.CString(string(want))
		defer C.free(unsafe.Pointer(cs))
		defer C.free(unsafe.Pointer(cw))
		for size := 64 << 10; ; {
			buf := C.malloc(C.size_t(size))
			n := int64(C.kb_call_probe(f, cs, cw, (*C.char)(buf), C.longlong(size)))
			switch {
			case n >= 0 && n <= int64(size):
				b := C.GoBytes(buf, C.int(n))
				C.free(buf)
				return b, nil
			case n < -1 && -n <= maxProbeAnswer && int(-n) > size:
				C.free(buf)
				size = int(-n)
				continue
			}
			C.free(buf)
			if n == -1 {
				return nil, errors.New("the probe raised an exception")
			}
			return nil, fmt.Errorf("the probe answered %d", n)
		}
	}
}
