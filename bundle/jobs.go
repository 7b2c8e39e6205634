package bundle

import "runtime"

// MaxJobs is the largest number of parallel workers any operation of this
// package starts, whatever it is asked for: each pack worker may hold two
// segments in memory and each extraction worker one, so a huge --jobs
// would only exhaust memory (or, past the channel size limit, panic).
const MaxJobs = 1024

// Jobs returns the number of workers to use for a requested n: all cores
// (GOMAXPROCS) for n <= 0, else n, at most 4 per core and at most
// MaxJobs. Every parallel operation of this package goes through it.
func Jobs(n int) int {
	procs := runtime.GOMAXPROCS(0)
	if n <= 0 {
		n = procs
	}
	return max(1, min(n, 4*procs, MaxJobs))
}
