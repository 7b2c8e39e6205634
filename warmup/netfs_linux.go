package warmup

import "syscall"

// NetworkFS reports the name of the network file system holding path, or
// "" when it is local or cannot be told (statfs failed).
func NetworkFS(path string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return ""
	}
	return networkFSName(uint32(st.Type))
}
