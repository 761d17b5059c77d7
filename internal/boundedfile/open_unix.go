//go:build unix

package boundedfile

import "syscall"

// nonBlocking makes opening a named pipe return at once instead of
// waiting for a writer.
const nonBlocking = syscall.O_NONBLOCK
