package main

import (
	"os"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
)

// minePrefix is loadcmd.MinePrefix under $TMPDIR.
func minePrefix(user string) string { return loadcmd.MinePrefix(os.Getenv("TMPDIR"), user) }

// mineTrees is bundle.MineTrees of user's default DEST siblings.
func mineTrees(user string, uid int) ([]string, error) {
	return bundle.MineTrees(minePrefix(user), uid)
}
