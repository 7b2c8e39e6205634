package mpi

import (
	"os"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// TestMain removes the kbundle builds the tests made.
func TestMain(m *testing.M) { os.Exit(testutil.Main(m)) }
