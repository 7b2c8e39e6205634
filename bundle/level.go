package bundle

import (
	"fmt"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// Level is a compression level, named as in zstd's speed classes.
type Level int

const (
	LevelDefault Level = iota // about zstd -3
	LevelFastest              // about zstd -1
	LevelBetter               // about zstd -7
	LevelBest                 // about zstd -11
)

var levelNames = map[string]Level{"fastest": LevelFastest, "default": LevelDefault, "better": LevelBetter, "best": LevelBest}

// LevelNames lists the accepted level names.
const LevelNames = "fastest, default, better, best"

// ParseLevel maps a level name to a Level.
func ParseLevel(name string) (Level, error) {
	if l, ok := levelNames[strings.ToLower(name)]; ok {
		return l, nil
	}
	return 0, fmt.Errorf("unknown compression level %q (use one of: %s)", name, LevelNames)
}

func (l Level) String() string {
	for n, v := range levelNames {
		if v == l {
			return n
		}
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

func (l Level) zstd() zstd.EncoderLevel {
	switch l {
	case LevelFastest:
		return zstd.SpeedFastest
	case LevelBetter:
		return zstd.SpeedBetterCompression
	case LevelBest:
		return zstd.SpeedBestCompression
	}
	return zstd.SpeedDefault
}
