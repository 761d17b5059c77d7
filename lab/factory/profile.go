package factory

import (
	"fmt"
	"strings"
)

// checkProfilePath accepts the asset paths the Image Factory's
// profile.ParseFromPath (internal/profile) accepts and refuses the others
// with its error texts: kernel-<arch>, cmdline-<platform>-<arch>,
// initramfs-<arch>.xz, <platform>-<arch>[-secureboot].iso,
// <platform>-<arch>[-secureboot]-uki.efi, installer-<arch>[-secureboot].tar,
// <platform>-installer-<arch>.tar, and disk images
// <platform>-<arch>[-secureboot].{raw,qcow2,vhd,ova}[.tar.gz|.gz|.xz|.zst].
// Architectures are amd64 and arm64 (x86_64 and i386 mean amd64). Whether
// the platform exists is decided later by the factory's imager, which the
// emulator does not model.
func checkProfilePath(path string) error {
	if rest, ok := strings.CutPrefix(path, "kernel-"); ok {
		return checkArch(rest)
	}
	if rest, ok := strings.CutPrefix(path, "cmdline-"); ok {
		return checkPlatformArch(rest)
	}
	if rest, ok := strings.CutPrefix(path, "initramfs-"); ok {
		if rest, ok := strings.CutSuffix(rest, ".xz"); ok {
			return checkArch(rest)
		}
	}
	if rest, ok := strings.CutSuffix(path, ".iso"); ok {
		return checkPlatformArch(rest)
	}
	if rest, ok := strings.CutSuffix(path, "-uki.efi"); ok {
		return checkPlatformArch(rest)
	}
	if rest, ok := strings.CutPrefix(path, "installer-"); ok {
		if rest, ok := strings.CutSuffix(rest, ".tar"); ok {
			rest, _ = strings.CutSuffix(rest, "-secureboot")
			return checkArch(rest)
		}
	}
	if platform, rest, ok := strings.Cut(path, "-installer-"); ok {
		if rest, ok := strings.CutSuffix(rest, ".tar"); ok {
			return checkPlatformArch(platform + "-" + rest)
		}
	}
	rest := path
	for _, outFormat := range []string{".tar.gz", ".gz", ".xz", ".zst"} {
		if r, ok := strings.CutSuffix(rest, outFormat); ok {
			rest = r
			break
		}
	}
	disk := false
	for _, diskFormat := range []string{"raw", "qcow2", "vhd", "ova"} {
		if r, ok := strings.CutSuffix(rest, "."+diskFormat); ok {
			rest, disk = r, true
			break
		}
	}
	if !disk {
		return fmt.Errorf("invalid profile path: %q", rest)
	}
	return checkPlatformArch(rest)
}

func checkPlatformArch(s string) error {
	s, _ = strings.CutSuffix(s, "-secureboot")
	platform, rest, ok := strings.Cut(s, "-")
	if !ok {
		return fmt.Errorf("invalid platform-arch: %q", s)
	}
	if platform == "digital" && strings.HasPrefix(rest, "ocean-") {
		rest = strings.TrimPrefix(rest, "ocean-")
	}
	return checkArch(rest)
}

func checkArch(s string) error {
	switch s {
	case "amd64", "arm64", "x86_64", "i386":
		return nil
	}
	return fmt.Errorf("invalid architecture: %q", s)
}
