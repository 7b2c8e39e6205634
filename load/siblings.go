package load

import (
	"path/filepath"
)

// DestPrefix is what every default destination of user under tmp starts
// with (Dest without the job): `kbundle status` and `kbundle clean
// --all-mine` list the directories named so. The prefix alone does not
// make a directory the user's (user "a" has the prefix of user "a-b"'s
// trees too): callers check the owner.
func DestPrefix(tmp, user string) string {
	if tmp == "" {
		tmp = "/tmp"
	}
	return filepath.Join(tmp, "kbundle-"+safeName(user)) + "-"
}
