package main

/*
#include <stdlib.h>
*/
import "C"

import (
	"encoding/json"

	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
)

// kbundle_status is `kbundle status --json` on this node, for Python's
// status(): request and answer are loadcmd.StatusRequest and
// loadcmd.StatusAnswer. It makes no MPI call and is not collective.
//
//export kbundle_status
func kbundle_status(request *C.char) *C.char {
	b, _ := json.Marshal(loadcmd.StatusOf([]byte(C.GoString(request))))
	return C.CString(string(b))
}
