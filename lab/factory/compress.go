package factory

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"strings"
	"time"

	"github.com/ulikunitz/xz"
)

// compress wraps data the way the file's name says: an xz stream for *.xz,
// a gzip stream of a tar archive holding disk.raw for *.tar.gz, a gzip
// stream for other *.gz names, data itself otherwise. The output depends on
// data alone (no timestamps), so an image is the same in every run.
func compress(file string, data []byte) []byte {
	var buf bytes.Buffer
	switch {
	case strings.HasSuffix(file, ".xz"):
		w, err := xz.NewWriter(&buf)
		if err != nil {
			return data
		}
		_, _ = w.Write(data)
		if err := w.Close(); err != nil {
			return data
		}
	case strings.HasSuffix(file, ".tar.gz"):
		zw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		_ = tw.WriteHeader(&tar.Header{Name: "disk.raw", Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0), Format: tar.FormatUSTAR})
		_, _ = tw.Write(data)
		_ = tw.Close()
		_ = zw.Close()
	case strings.HasSuffix(file, ".gz"):
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(data)
		_ = zw.Close()
	default:
		return data
	}
	return buf.Bytes()
}
