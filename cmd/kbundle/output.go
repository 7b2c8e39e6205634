package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/detect"
)

// human formats a byte count with a binary unit.
func human(n int64) string { return loadcmd.HumanBytes(n) }

// ratio is raw/packed, 0 for an empty bundle.
func ratio(raw, packed int64) float64 {
	if packed == 0 {
		return 0
	}
	return float64(raw) / float64(packed)
}

// plural gives "1 file", "2 files", "0 directories".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// elapsed rounds a duration for a summary line: ms below a minute.
func elapsed(d time.Duration) time.Duration {
	if d < time.Minute {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

// safe returns s unchanged when it is valid UTF-8 without control,
// format (bidi overrides) or other non-printing characters and does not
// start with a double quote, and Go-quoted otherwise, so that a bundle's names and metadata, or a path,
// can never move the cursor, clear the screen, fake a line or reverse
// text on the terminal of whoever lists them.
// (loadcmd.Safe, which load's messages use too.)
func safe(s string) string { return loadcmd.Safe(s) }

// cut shortens s to at most n runes, ending it with "…" when cut.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// say prints one "kbundle: ..." line on stderr unless --quiet.
func say(c *cli.Context, format string, a ...any) {
	if c.Bool("quiet") {
		return
	}
	fmt.Fprintf(c.App.ErrWriter, "kbundle: "+format+"\n", a...)
}

// warn prints one "kbundle: warning: ..." line on stderr, even with --quiet.
func warn(c *cli.Context, format string, a ...any) {
	fmt.Fprintf(c.App.ErrWriter, "kbundle: warning: "+format+"\n", a...)
}

// writeJSON writes v as one indented JSON object and a newline; in one
// of several tasks of a launcher, as one line (writeJSONLine): there a
// command that runs once a task (version, clean) prints one object a
// task, and one a line is a stream that JSON Lines readers and jq both
// read (issue 25, U46).
func writeJSON(w io.Writer, v any) error {
	if manyTasks() {
		return writeJSONLine(w, v)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// manyTasks reports whether this process is one of several tasks that a
// launcher started, as its variables say.
func manyTasks() bool {
	r, err := detect.FromEnviron()
	return err == nil && r.MPI && r.Size != 1
}

// writeJSONLine writes v as one JSON object on one line.
func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
