package loadcmd

import (
	"fmt"
	"time"

	"github.com/kbundle/kbundle/bundle"
)

// Guard bounds a load by d, from before its first collective (a rank that
// never reaches one blocks the others there already) to stop: when d runs
// out (a node or link down, a rank gone), the temporary trees and the
// claimed empty destinations are removed (bundle.RemoveTemps) and abort is
// called with the message, which must end the job (MPI_Abort): no
// collective can be abandoned half-way. d <= 0: no guard. Both front ends
// arm it, rank being this process's rank and host its name.
func Guard(f Front, d time.Duration, rank int, host string, abort func(msg string)) (stop func()) {
	why := "a node or link may be down"
	if f == Python {
		why += ", or a rank did not call it"
	}
	return GuardFor(f.name(), why, d, rank, host, abort)
}

// GuardFor is Guard for the collective named what (harvest), why saying
// what may have happened.
func GuardFor(what, why string, d time.Duration, rank int, host string, abort func(msg string)) (stop func()) {
	if d <= 0 {
		return func() {}
	}
	t := time.AfterFunc(d, func() {
		bundle.RemoveTemps()
		abort(fmt.Sprintf("rank %d (%s): %s did not finish within %s (%s); aborting the job", rank, host, what, d, why))
	})
	return func() { t.Stop() }
}
