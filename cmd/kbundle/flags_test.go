package main

import "testing"

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64 // -1: an error
	}{
		{"0", 0},
		{"123", 123},
		{"123B", 123},
		{"20G", 20 << 30},
		{"20g", 20 << 30},
		{"500M", 500 << 20},
		{"500MiB", 500 << 20},
		{"500MB", 500 << 20},
		{"4k", 4096},
		{"1.5G", 3 << 29},
		{"2T", 2 << 40},
		{" 7M ", 7 << 20},
		{"8191P", -1},
		{"", -1},
		{"G", -1},
		{"-1", -1},
		{"+5", -1},
		{"1e3", -1},
		{"0x10", -1},
		{"NaN", -1},
		{"1_000", -1},
		{"10 G", -1},
		{"9223372036854775807", 9223372036854775807},
		{"9223372036854775808", -1},
		{"8388608T", -1},
	} {
		got, err := parseSize(tc.in)
		switch {
		case tc.want < 0 && err == nil:
			t.Errorf("parseSize(%q) = %d, want an error", tc.in, got)
		case tc.want >= 0 && (err != nil || got != tc.want):
			t.Errorf("parseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}
