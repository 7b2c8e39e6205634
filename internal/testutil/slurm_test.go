package testutil

import "testing"

func TestJobEnded(t *testing.T) {
	for _, c := range []struct {
		rec          string
		state        string
		exit, signal int
		ended        bool
	}{
		{"JobId=5 JobName=x JobState=RUNNING Reason=None ExitCode=0:0", "", 0, 0, false},
		{"JobId=5 JobName=x JobState=COMPLETED Reason=None ExitCode=0:0", "COMPLETED", 0, 0, true},
		{"JobId=5 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0", "FAILED", 3, 0, true},
		{"JobId=5 JobState=CANCELLED ExitCode=0:15", "CANCELLED", 0, 15, true},
		{"slurm_load_jobs error: Invalid job id specified", "", 0, 0, false},
	} {
		state, exit, signal, ended := JobEnded(c.rec)
		if state != c.state || exit != c.exit || signal != c.signal || ended != c.ended {
			t.Errorf("%q: %q %d:%d %v, want %q %d:%d %v", c.rec, state, exit, signal, ended, c.state, c.exit, c.signal, c.ended)
		}
	}
}
