internal import CSodium

/// Bytes kept in guarded memory: allocated with `sodium_malloc` (guard
/// pages, `mlock`ed, so never swapped), read-only once filled
/// (`sodium_mprotect_readonly`), wiped and freed by `sodium_free` in `deinit`.
///
/// Thread safety: immutable after initialisation, so it may be shared
/// between threads; the memory is released when the last reference goes.
public final class SecureBytes: @unchecked Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    private let pointer: UnsafeMutableRawPointer
    /// The number of bytes.
    public let count: Int

    /// Fills new guarded memory through `fill`, then makes it read-only.
    public init(count: Int, fill: (UnsafeMutableRawBufferPointer) throws -> Void) throws {
        Sodium.ensureReady()
        guard let p = sodium_malloc(max(count, 1)) else {
            throw CryptoError(.outOfMemory, "could not allocate \(count) bytes of guarded memory (sodium_malloc)")
        }
        pointer = p
        self.count = count
        do {
            try fill(UnsafeMutableRawBufferPointer(start: p, count: count))
        } catch {
            sodium_free(p)
            throw error
        }
        _ = sodium_mprotect_readonly(p)
    }

    /// Copies `bytes` into guarded memory. The caller wipes its own copy.
    public convenience init(copying bytes: [UInt8]) throws {
        try self.init(count: bytes.count) { dst in
            bytes.withUnsafeBytes { src in dst.copyMemory(from: src) }
        }
    }

    /// `count` random bytes in guarded memory (`randombytes_buf`).
    public static func random(count: Int) throws -> SecureBytes {
        try SecureBytes(count: count) { dst in randombytes_buf(dst.baseAddress!, dst.count) }
    }

    deinit {
        sodium_free(pointer)
    }

    /// Borrowed read access; the pointer must not escape `body`.
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: pointer, count: count))
    }

    /// Constant-time comparison (`sodium_memcmp`).
    public func constantTimeEquals(_ other: SecureBytes) -> Bool {
        guard count == other.count else { return false }
        return other.withUnsafeBytes { o in sodium_memcmp(pointer, o.baseAddress!, count) == 0 }
    }

    public var description: String { "SecureBytes(\(count) bytes, redacted)" }
    public var debugDescription: String { description }
}
