package warmup

// networkFS names file systems, by statfs f_type magic (linux/magic.h and
// the file systems' own sources), whose content is shared over a network:
// a cache directory there is slow to fill, and concurrent writers from
// many nodes are what kbundle exists to avoid.
var networkFS = map[uint32]string{
	0x6969:     "NFS",
	0x517B:     "SMB",
	0xFF534D42: "CIFS",
	0xFE534D42: "SMB2",
	0x0BD00BD0: "Lustre",
	0x47504653: "GPFS (IBM Storage Scale)",
	0x19830326: "BeeGFS",
	0x00C36400: "CephFS",
	0x5346414F: "AFS",
	0x6B414653: "kAFS",
	0x73757245: "Coda",
	0x01021997: "9P",
	0x564C:     "NCP",
	0x7461636F: "OCFS2",
	0x01161970: "GFS2",
	0xAAD7AAEA: "PanFS",
}

// networkFSName returns the name of the network file system with the given
// statfs magic, or "" when it is not one known here.
func networkFSName(magic uint32) string { return networkFS[magic] }
