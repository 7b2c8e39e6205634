// Package bundle reads and writes kbundle bundles: one file holding a whole
// compiled-kernel cache directory, compressed with zstd in independent
// segments and checked with xxh3-128 digests. docs/FORMAT.md is the
// specification.
//
// The package knows bytes and files only: it reads no environment variable
// and probes no host (the caller passes the host description and the
// content time in PackOptions, and whom to trust besides the user and root
// as a TrustPolicy in OpenOptions, ExtractOptions and PackOptions; the
// front ends build it from KBUNDLE_TRUSTED_GROUPS and
// KBUNDLE_TRUSTED_OWNERS with ParseTrust). It never talks to MPI, never
// trusts a length or a name read from a bundle before checking it against a
// named limit, never follows a symlink while extracting, never leaves a
// partial output file or half-extracted directory behind, and never
// removes a file or tree it cannot prove to be one of its own temporaries
// whose process is gone (RemoveStale).
package bundle
