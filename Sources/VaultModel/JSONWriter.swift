/// Writes JSON objects straight to bytes, without building a `JSON` value
/// first: for the answers on the hot path (a token, a request), where the
/// tree and its copies cost more than the work itself.
///
/// With `framed`, four bytes are kept in front for the protocol's length
/// prefix, which `finish()` fills in, so the frame is never copied.
/// Give `capacity` for the whole text when it holds a secret: a buffer that
/// grows leaves its old copy behind in freed memory.
public struct JSONWriter {
    public private(set) var bytes: [UInt8]
    private let framed: Bool
    private var needsComma = false

    public init(capacity: Int = 256, framed: Bool = false) {
        bytes = []
        bytes.reserveCapacity(capacity)
        self.framed = framed
        if framed { bytes.append(contentsOf: [0, 0, 0, 0]) }
    }

    /// Opens an object: the top-level one (no key), or the member `key`.
    public mutating func beginObject(_ key: String? = nil) {
        if let key { self.key(key) } else { comma() }
        bytes.append(UInt8(ascii: "{"))
        needsComma = false
    }

    /// Closes the innermost open object.
    public mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        needsComma = true
    }

    /// A string member.
    public mutating func field(_ key: String, _ value: String) {
        self.key(key)
        JSON.writeString(value, to: &bytes)
    }

    /// A string member from UTF-8 bytes that are already known to be valid.
    public mutating func field(_ key: String, utf8 value: UnsafeBufferPointer<UInt8>) {
        self.key(key)
        JSON.writeString(utf8: value, to: &bytes)
    }

    /// A number member.
    public mutating func field(_ key: String, _ value: Double) {
        self.key(key)
        JSON.writeNumber(value, to: &bytes)
    }

    /// A Boolean member.
    public mutating func field(_ key: String, _ value: Bool) {
        self.key(key)
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
    }

    /// A member of any value (`null` included).
    public mutating func field(_ key: String, _ value: JSON) {
        self.key(key)
        value.write(to: &bytes)
    }

    /// The text, with its length prefix filled in when framed.
    public consuming func finish() -> [UInt8] {
        if framed {
            let n = UInt32(bytes.count - 4)
            bytes[0] = UInt8(n >> 24)
            bytes[1] = UInt8(n >> 16 & 0xFF)
            bytes[2] = UInt8(n >> 8 & 0xFF)
            bytes[3] = UInt8(n & 0xFF)
        }
        return bytes
    }

    private mutating func comma() {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
    }

    private mutating func key(_ key: String) {
        comma()
        JSON.writeString(key, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        needsComma = true
    }
}
