package bundle

import (
	"strconv"
	"strings"
	"unicode"
)

// Printable returns s unchanged when every rune of it is printable and not
// a bidirectional control, else s as a Go-quoted string ("a\nb",
// "\x1b[2J", "x\u202egnp.sh"). Names, metadata and paths go through it
// before they are printed, so a bundle cannot move the cursor, clear the
// terminal, fake a line of output or reorder text (review finding W9).
// Quoted output starts with a double quote, which no unquoted output
// produced by Printable can be confused with unless s itself starts with
// one; such s is quoted too.
func Printable(s string) string {
	if strings.HasPrefix(s, `"`) || strings.IndexFunc(s, unsafeRune) >= 0 {
		return strconv.QuoteToGraphic(s)
	}
	return s
}

func unsafeRune(r rune) bool {
	if r == unicode.ReplacementChar || !unicode.IsPrint(r) && r != ' ' {
		return true
	}
	return unicode.Is(unicode.Bidi_Control, r)
}
