/// A JSON value (RFC 8259), parsed and written without Foundation so that the
/// client library and `vaultctl` start fast and link nothing they do not use.
///
/// Objects keep their keys in insertion order, so what is written is stable
/// and unknown fields of a token response survive a round trip.
public enum JSON: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSON])
    case object(JSONObject)

    /// The string, if this is a string.
    public var stringValue: String? { if case .string(let s) = self { return s } else { return nil } }
    /// The number, if this is a number.
    public var numberValue: Double? { if case .number(let n) = self { return n } else { return nil } }
    /// The Boolean, if this is a Boolean.
    public var boolValue: Bool? { if case .bool(let b) = self { return b } else { return nil } }
    /// The object, if this is an object.
    public var objectValue: JSONObject? { if case .object(let o) = self { return o } else { return nil } }
    /// The array, if this is an array.
    public var arrayValue: [JSON]? { if case .array(let a) = self { return a } else { return nil } }
    /// Whether this is `null`.
    public var isNull: Bool { if case .null = self { return true } else { return false } }

    /// The member `key` of an object, or nil.
    public subscript(key: String) -> JSON? { objectValue?[key] }

    /// A short name of the value's type, for error messages ("a string").
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "a boolean"
        case .number: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }
}

/// An ordered JSON object.
public struct JSONObject: Sendable, Equatable, Sequence {
    /// The members in order.
    public private(set) var members: [(key: String, value: JSON)] = []

    public init() {}

    /// An empty object with room for `capacity` members.
    init(capacity: Int) { members.reserveCapacity(capacity) }

    /// An object with these members in order; a repeated key keeps its last value.
    public init(_ members: [(String, JSON)]) {
        self.members.reserveCapacity(members.count)
        for (k, v) in members {
            if self.members.contains(where: { $0.key == k }) { self[k] = v } else { self.members.append((k, v)) }
        }
    }

    /// Appends a member whose key the caller knows is new.
    mutating func appendNew(_ key: String, _ value: JSON) {
        members.append((key, value))
    }

    /// Whether `key` is present.
    public func contains(_ key: String) -> Bool { members.contains { $0.key == key } }

    public static func == (a: JSONObject, b: JSONObject) -> Bool {
        guard a.members.count == b.members.count else { return false }
        for (x, y) in zip(a.members, b.members) where x.key != y.key || x.value != y.value { return false }
        return true
    }

    /// The value of `key`; setting nil removes it.
    public subscript(key: String) -> JSON? {
        get { members.first(where: { $0.key == key })?.value }
        set {
            if let i = members.firstIndex(where: { $0.key == key }) {
                if let newValue { members[i].value = newValue } else { members.remove(at: i) }
            } else if let newValue {
                members.append((key, newValue))
            }
        }
    }

    /// The keys in order.
    public var keys: [String] { members.map(\.key) }

    public func makeIterator() -> IndexingIterator<[(key: String, value: JSON)]> { members.makeIterator() }
}

/// Why a text is not JSON: the byte offset and what was expected.
public struct JSONParseError: Error, Sendable, CustomStringConvertible {
    /// Offset in bytes from the start of the input.
    public let offset: Int
    /// What was wrong.
    public let reason: String
    public var description: String { "invalid JSON at byte \(offset): \(reason)" }
}

extension JSON {
    /// The deepest nesting accepted; deeper input is refused, not recursed into.
    public static let maxDepth = 64

    /// Parses one JSON text (RFC 8259 section 2), allowing surrounding whitespace.
    public static func parse(_ bytes: some Collection<UInt8>) throws(JSONParseError) -> JSON {
        if let result = bytes.withContiguousStorageIfAvailable({ buffer in Result { () throws(JSONParseError) in try parse(buffer) } }) {
            return try result.get()
        }
        return try parse(Array(bytes))
    }

    /// Parses one JSON text held in contiguous memory.
    public static func parse(_ bytes: UnsafeBufferPointer<UInt8>) throws(JSONParseError) -> JSON {
        var parser = JSONParser(bytes: bytes)
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        guard parser.index == bytes.count else { throw parser.error("unexpected data after the value") }
        return value
    }

    /// Parses one JSON text from a string.
    public static func parse(_ text: String) throws(JSONParseError) -> JSON {
        try parse(Array(text.utf8))
    }
}

/// Reads bytes through an unsafe buffer: every index is checked against
/// `bytes.count` before it is read, so no second (bounds) check is needed.
private struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0

    func error(_ reason: String) -> JSONParseError { JSONParseError(offset: index, reason: reason) }

    mutating func skipWhitespace() {
        while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x0A || bytes[index] == 0x0D || bytes[index] == 0x09 {
            index += 1
        }
    }

    mutating func expect(_ literal: String, _ value: JSON) throws(JSONParseError) -> JSON {
        for b in literal.utf8 {
            guard index < bytes.count, bytes[index] == b else { throw error("invalid literal") }
            index += 1
        }
        return value
    }

    /// `depth` is the number of arrays and objects around the value; the
    /// value may itself be one more, up to `JSON.maxDepth` in all.
    mutating func parseValue(depth: Int) throws(JSONParseError) -> JSON {
        guard index < bytes.count else { throw error("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            guard depth < JSON.maxDepth else { throw error("nesting deeper than \(JSON.maxDepth)") }
            return bytes[index] == UInt8(ascii: "{") ? try parseObject(depth: depth) : try parseArray(depth: depth)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): return try expect("true", .bool(true))
        case UInt8(ascii: "f"): return try expect("false", .bool(false))
        case UInt8(ascii: "n"): return try expect("null", .null)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw error("unexpected character")
        }
    }

    mutating func parseObject(depth: Int) throws(JSONParseError) -> JSON {
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") { index += 1; return .object(JSONObject()) }
        // Room for a typical request or token answer at once, instead of growing through 1, 2, 4, 8.
        var object = JSONObject(capacity: 8)
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a string key") }
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            let value = try parseValue(depth: depth + 1)
            guard !object.contains(key) else { throw error("duplicate key \"\(key)\"") }
            object.appendNew(key, value)
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of input in an object") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "}") { index += 1; return .object(object) }
            throw error("expected ',' or '}'")
        }
    }

    mutating func parseArray(depth: Int) throws(JSONParseError) -> JSON {
        index += 1
        var array: [JSON] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") { index += 1; return .array(array) }
        while true {
            skipWhitespace()
            array.append(try parseValue(depth: depth + 1))
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of input in an array") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(array) }
            throw error("expected ',' or ']'")
        }
    }

    mutating func hex4() throws(JSONParseError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw error("short \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = bytes[index]
            let d: UInt32
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(c - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(c - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(c - UInt8(ascii: "A") + 10)
            default: throw error("bad hex digit in \\u escape")
            }
            v = v << 4 | d
            index += 1
        }
        return v
    }

    mutating func parseString() throws(JSONParseError) -> String {
        index += 1
        let start = index
        // Fast path: no escapes. `high` collects the top bits, so an ASCII
        // string (tokens, names) needs no UTF-8 validation afterwards.
        var high: UInt8 = 0
        while index < bytes.count {
            let c = bytes[index]
            if c == UInt8(ascii: "\"") {
                let run = UnsafeBufferPointer(rebasing: bytes[start..<index])
                let s = high < 0x80 ? String(decoding: run, as: UTF8.self) : try validated(run, at: start)
                index += 1
                return s
            }
            if c == UInt8(ascii: "\\") { break }
            if c < 0x20 { throw error("control character in a string") }
            high |= c
            index += 1
        }
        var out = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            let c = bytes[index]
            if c == UInt8(ascii: "\"") {
                index += 1
                return try out.withUnsafeBufferPointer { (o) throws(JSONParseError) -> String in try validated(o, at: start) }
            }
            if c < 0x20 { throw error("control character in a string") }
            if c != UInt8(ascii: "\\") { out.append(c); index += 1; continue }
            index += 1
            guard index < bytes.count else { break }
            let e = bytes[index]
            index += 1
            switch e {
            case UInt8(ascii: "\""): out.append(0x22)
            case UInt8(ascii: "\\"): out.append(0x5C)
            case UInt8(ascii: "/"): out.append(0x2F)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4()
                if (0xD800...0xDBFF).contains(scalar) {
                    guard index + 2 <= bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                        throw error("unpaired surrogate in \\u escape")
                    }
                    index += 2
                    let low = try hex4()
                    guard (0xDC00...0xDFFF).contains(low) else { throw error("unpaired surrogate in \\u escape") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(scalar) {
                    throw error("unpaired surrogate in \\u escape")
                }
                guard let u = Unicode.Scalar(scalar) else { throw error("invalid \\u escape") }
                out.append(contentsOf: Array(String(Character(u)).utf8))
            default:
                throw error("invalid escape")
            }
        }
        throw error("unterminated string")
    }

    func validated(_ slice: UnsafeBufferPointer<UInt8>, at offset: Int) throws(JSONParseError) -> String {
        // ASCII needs no validation, and the generic validating initialiser is costly on a hot path.
        if !slice.contains(where: { $0 >= 0x80 }) { return String(decoding: slice, as: UTF8.self) }
        guard let s = String(validating: slice, as: UTF8.self) else {
            throw JSONParseError(offset: offset, reason: "string is not valid UTF-8")
        }
        return s
    }

    mutating func parseNumber() throws(JSONParseError) -> JSON {
        let start = index
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        func digits(_ p: inout JSONParser) -> Int {
            let s = p.index
            while p.index < p.bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(p.bytes[p.index]) { p.index += 1 }
            return p.index - s
        }
        guard index < bytes.count else { throw error("bad number") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else if digits(&self) == 0 {
            throw error("bad number")
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digits(&self) > 0 else { throw error("bad number: no digits after '.'") }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard digits(&self) > 0 else { throw error("bad number: no digits in exponent") }
        }
        // Fast path: a plain integer of at most 15 digits is exact as a Double.
        let negative = bytes[start] == UInt8(ascii: "-")
        let digitsStart = negative ? start + 1 : start
        if index - digitsStart <= 15, !bytes[digitsStart..<index].contains(where: { $0 < UInt8(ascii: "0") || $0 > UInt8(ascii: "9") }) {
            var v: Int64 = 0
            for b in bytes[digitsStart..<index] { v = v * 10 + Int64(b - UInt8(ascii: "0")) }
            return .number(Double(negative ? -v : v))
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        guard let value = Double(text), value.isFinite else { throw JSONParseError(offset: start, reason: "number out of range") }
        return .number(value)
    }
}

extension JSON {
    /// The compact serialization of this value (no whitespace), as UTF-8.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(128)
        write(to: &out)
        return out
    }

    /// The compact serialization as a string.
    public var serializedString: String { String(decoding: serialized(), as: UTF8.self) }

    /// Appends the compact serialization to `out`.
    public func write(to out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .number(let n): JSON.writeNumber(n, to: &out)
        case .string(let s): JSON.writeString(s, to: &out)
        case .array(let a):
            out.append(UInt8(ascii: "["))
            for (i, v) in a.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                v.write(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let o):
            out.append(UInt8(ascii: "{"))
            for (i, m) in o.members.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSON.writeString(m.key, to: &out)
                out.append(UInt8(ascii: ":"))
                m.value.write(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// An upper bound of the serialized size in bytes (every string byte
    /// escaped as `\u00XX`), for buffers that must not grow while they hold a secret.
    public var maxSerializedCount: Int {
        switch self {
        case .null, .bool: return 5
        case .number: return 32
        case .string(let s): return 2 + 6 * s.utf8.count
        case .array(let a): return 2 + a.reduce(0) { $0 + $1.maxSerializedCount + 1 }
        case .object(let o): return 2 + o.members.reduce(0) { $0 + 3 + 6 * $1.key.utf8.count + $1.value.maxSerializedCount + 1 }
        }
    }

    /// Writes a number: an integer of up to 15 digits exactly, anything else as Swift prints a Double.
    public static func writeNumber(_ n: Double, to out: inout [UInt8]) {
        guard n.rounded() == n, abs(n) < 1e15 else {
            out.append(contentsOf: "\(n)".utf8)
            return
        }
        var v = Int64(n)
        if v < 0 { out.append(UInt8(ascii: "-")); v = -v }
        var digits: (UInt64, UInt64) = (0, 0)  // 16 bytes: room for the 15 digits, written from the end
        withUnsafeMutableBytes(of: &digits) { d in
            var i = d.count
            repeat {
                i -= 1
                d[i] = UInt8(ascii: "0") + UInt8(v % 10)
                v /= 10
            } while v > 0
            out.append(contentsOf: UnsafeRawBufferPointer(rebasing: d[i...]))
        }
    }

    /// Writes `s` as a JSON string literal, escaping what RFC 8259 requires.
    public static func writeString(_ s: String, to out: inout [UInt8]) {
        var s = s
        s.withUTF8 { writeString(utf8: $0, to: &out) }
    }

    /// Writes UTF-8 bytes as a JSON string literal, escaping what RFC 8259
    /// requires; runs that need no escaping (most tokens and names are one
    /// run) are copied at once.
    public static func writeString(utf8 bytes: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        out.append(0x22)
        var run = 0
        for i in 0..<bytes.count {
            let b = bytes[i]
            guard b < 0x20 || b == 0x22 || b == 0x5C else { continue }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run..<i]))
            run = i + 1
            switch b {
            case 0x22: out.append(contentsOf: [0x5C, 0x22])
            case 0x5C: out.append(contentsOf: [0x5C, 0x5C])
            case 0x0A: out.append(contentsOf: [0x5C, UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [0x5C, UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [0x5C, UInt8(ascii: "t")])
            default:
                let hex = Array("0123456789abcdef".utf8)
                out.append(contentsOf: [0x5C, UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(b >> 4)], hex[Int(b & 0xF)]])
            }
        }
        out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run...]))
        out.append(0x22)
    }
}

extension JSON: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral, ExpressibleByNilLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .number(Double(value)) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(nilLiteral: ()) { self = .null }
}
