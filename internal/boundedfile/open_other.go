//go:build !unix

package boundedfile

// nonBlocking is 0 where there are no named pipes to wait on.
const nonBlocking = 0
