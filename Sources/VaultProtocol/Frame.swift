/// Framing of the TokenVault socket protocol (docs/protocol.md): each
/// message is a 4-byte big-endian length followed by that many bytes of a
/// UTF-8 JSON object.
public enum Frame {
    /// The largest request payload the daemon accepts (64 KiB).
    public static let maxPayload = 64 * 1024
    /// The largest response payload a client accepts (16 MiB): a `list` of
    /// many items is larger than any request needs to be.
    public static let maxResponsePayload = 16 * 1024 * 1024

    /// The frame for `payload`: length prefix and bytes.
    public static func encode(_ payload: [UInt8]) -> [UInt8] {
        let n = UInt32(payload.count)
        var out: [UInt8] = [UInt8(n >> 24), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)]
        out.reserveCapacity(4 + payload.count)
        out.append(contentsOf: payload)
        return out
    }
}

/// Why a byte stream is not a valid sequence of frames.
public enum FrameError: Error, Sendable, Equatable {
    /// A frame announced more than `Frame.maxPayload` bytes (or zero).
    case badLength(UInt32)
}

/// Accumulates bytes from a stream and cuts them into frames.
public struct FrameBuffer: Sendable {
    private var bytes: [UInt8] = []
    private var start = 0
    /// The largest payload accepted.
    public let maxPayload: Int

    public init(maxPayload: Int = Frame.maxPayload) { self.maxPayload = maxPayload }

    /// Appends bytes read from the stream.
    public mutating func append(_ data: ArraySlice<UInt8>) {
        if start > 0 && start == bytes.count {
            bytes.removeAll(keepingCapacity: true)
            start = 0
        }
        bytes.append(contentsOf: data)
    }

    /// Whether a partial frame is waiting for more bytes.
    public var hasPartialFrame: Bool { bytes.count > start }

    /// The next complete payload, nil if more bytes are needed; throws on a bad length.
    public mutating func next() throws(FrameError) -> [UInt8]? {
        let available = bytes.count - start
        guard available >= 4 else { return nil }
        let n = UInt32(bytes[start]) << 24 | UInt32(bytes[start + 1]) << 16 | UInt32(bytes[start + 2]) << 8 | UInt32(bytes[start + 3])
        guard n > 0, n <= UInt32(maxPayload) else { throw .badLength(n) }
        guard available >= 4 + Int(n) else { return nil }
        let payload = Array(bytes[(start + 4)..<(start + 4 + Int(n))])
        start += 4 + Int(n)
        if start == bytes.count {
            bytes.removeAll(keepingCapacity: true)
            start = 0
        } else if start > 64 * 1024 {
            bytes.removeFirst(start)
            start = 0
        }
        return payload
    }

    /// Overwrites the buffered bytes with zeros (they may hold a passphrase).
    public mutating func wipe() {
        for i in bytes.indices { bytes[i] = 0 }
        bytes.removeAll()
        start = 0
    }
}
