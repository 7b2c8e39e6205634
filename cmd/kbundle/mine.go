package main

import (
	"os"

	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/load"
)

// minePrefix is loadcmd.MinePrefix under $TMPDIR.
func minePrefix(user string) string { return loadcmd.MinePrefix(os.Getenv("TMPDIR"), user) }

// mineTrees is load.MineTrees of user's default DEST siblings.
func mineTrees(user string, uid int) ([]string, error) {
	return load.MineTrees(minePrefix(user), uid)
}
