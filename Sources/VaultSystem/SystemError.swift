@preconcurrency import Glibc

/// A failed system call: which call, on what, and errno.
public struct SystemError: Error, Sendable, CustomStringConvertible {
    /// The call that failed (`"open"`, `"bind"`).
    public let call: String
    /// What it was called on (a path, "socket"); never a secret.
    public let subject: String
    /// The errno value.
    public let errno: Int32

    public init(_ call: String, _ subject: String, errno: Int32 = Glibc.errno) {
        self.call = call
        self.subject = subject
        self.errno = errno
    }

    public var description: String {
        "\(call) \(subject): \(String(cString: strerror(errno)))"
    }
}

/// Calls `body` until it does not fail with `EINTR`; the one retry helper.
@inline(__always)
public func retryOnInterrupt<T: BinaryInteger>(_ body: () -> T) -> T {
    while true {
        let r = body()
        if r == -1 && errno == EINTR { continue }
        return r
    }
}
