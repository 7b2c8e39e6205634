// Package warmup runs an application once as a plain single process with
// its compiled-kernel cache pointed at a directory (Run, with the
// environment of package preset), reports what the run added to the cache
// (TakeSnapshot, Diff), and checks that a filled cache is reused: a second
// run against a copy must compile nothing (Check, which asks each preset's
// HitWrite and Refusals what is only bookkeeping). NetworkFS names the
// network file system a directory is on, for the warm-up's warnings.
//
// It never lets a warm-up child believe it is one rank of an MPI job
// (preset.ChildEnv) and never touches files outside the cache directory it
// was given and its copy.
package warmup
