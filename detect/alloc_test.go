package detect

import (
	"errors"
	"testing"
)

func TestAllocationFrom(t *testing.T) {
	files := map[string]string{
		"/pbs/nodes4": "kbn1\nkbn1\nkbn2\nkbn3\n kbn4 \n\nkbn4\n",
		"/pbs/nodes1": "kbn1\nkbn1\nkbn1\n",
	}
	read := func(name string) ([]byte, error) {
		if s, ok := files[name]; ok {
			return []byte(s), nil
		}
		return nil, errors.New("no such file")
	}
	tests := []struct {
		name string
		env  map[string]string
		want Allocation
	}{
		{"none", nil, Allocation{}},
		{"slurm job num nodes", map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "4", "SLURM_NNODES": "4"},
			Allocation{"slurm", 4, "SLURM_JOB_NUM_NODES=4"}},
		{"slurm nnodes only", map[string]string{"SLURM_JOB_ID": "42", "SLURM_NNODES": "2"}, Allocation{"slurm", 2, "SLURM_NNODES=2"}},
		{"slurm one node", map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "1"}, Allocation{"slurm", 1, "SLURM_JOB_NUM_NODES=1"}},
		{"slurm unparsable", map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "4x", "SLURM_NNODES": "-1"}, Allocation{Scheduler: "slurm"}},
		{"slurm variables outside a job", map[string]string{"SLURM_JOB_NUM_NODES": "4"}, Allocation{}},
		{"pbs node file", map[string]string{"PBS_JOBID": "7.pbs", "PBS_NODEFILE": "/pbs/nodes4"}, Allocation{"pbs", 4, "PBS_NODEFILE (4 hosts)"}},
		{"pbs one host, many slots", map[string]string{"PBS_JOBID": "7.pbs", "PBS_NODEFILE": "/pbs/nodes1"}, Allocation{"pbs", 1, "PBS_NODEFILE (1 host)"}},
		{"pbs unreadable node file, torque count", map[string]string{"PBS_JOBID": "7.pbs", "PBS_NODEFILE": "/pbs/gone", "PBS_NUM_NODES": "3"},
			Allocation{"pbs", 3, "PBS_NUM_NODES=3"}},
		{"slurm emptied, pbs", map[string]string{"SLURM_JOB_ID": "", "SLURM_JOB_NUM_NODES": "", "PBS_JOBID": "7.pbs", "PBS_NUM_NODES": "2"}, Allocation{"pbs", 2, "PBS_NUM_NODES=2"}},
		{"pbs nothing known", map[string]string{"PBS_JOBID": "7.pbs"}, Allocation{Scheduler: "pbs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AllocationFrom(func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }, read)
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// FuzzNodeFileHosts: any text counts without a panic, never more hosts
// than lines.
func FuzzNodeFileHosts(f *testing.F) {
	f.Add("kbn1\nkbn1\nkbn2\n")
	f.Add("\n\n \t\n")
	f.Fuzz(func(t *testing.T, s string) {
		n := NodeFileHosts(s)
		lines := 1
		for _, c := range s {
			if c == '\n' {
				lines++
			}
		}
		if n < 0 || n > lines {
			t.Fatalf("%d hosts in %d lines", n, lines)
		}
	})
}
