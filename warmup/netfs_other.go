//go:build !linux

package warmup

// NetworkFS cannot tell on this system and returns "".
func NetworkFS(path string) string { return "" }
