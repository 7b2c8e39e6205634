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
	return GuardFor(f.name(), f.why(), d, rank, host, abort)
}

// HarvestGuard is Guard for a harvest (`kbundle harvest`, the binding's
// harvest()): the message names harvest.
func HarvestGuard(f Front, d time.Duration, rank int, host string, abort func(msg string)) (stop func()) {
	return GuardFor("harvest", f.why(), d, rank, host, abort)
}

// why says what may have happened when front f's collective did not
// finish in time.
func (f Front) why() string {
	if f == Python {
		return "a node or link may be down, or a rank did not call it"
	}
	return "a node or link may be down"
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
