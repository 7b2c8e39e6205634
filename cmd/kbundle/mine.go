package main

import (
	"os"

	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
)

// minePrefix is loadcmd.MinePrefix under $TMPDIR.
func minePrefix(user string) string { return loadcmd.MinePrefix(os.Getenv("TMPDIR"), user) }

// mineTrees is loadcmd.MineTrees of user's default DEST siblings.
func mineTrees(user string, uid int) ([]string, error) {
	return loadcmd.MineTrees(minePrefix(user), uid)
}
