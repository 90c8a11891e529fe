import Testing
import VaultModel

/// `JSONWriter`, which writes the hot path's answers without a JSON tree:
/// what it writes must be exactly what the tree would serialize to.
@Suite("JSONWriter")
struct JSONWriterTests {
    @Test func nestedObjects_matchTheTreeSerialization() throws {
        var w = JSONWriter()
        w.beginObject()
        w.field("id", 7.0)
        w.field("ok", true)
        w.beginObject("result")
        w.field("access_token", "gho_abc")
        w.field("expires_at", JSON.null)
        w.field("n", -12.5)
        w.endObject()
        w.field("after", "x")
        w.endObject()
        let text = String(decoding: w.finish(), as: UTF8.self)
        #expect(text == #"{"id":7,"ok":true,"result":{"access_token":"gho_abc","expires_at":null,"n":-12.5},"after":"x"}"#)
        let tree = JSON.object(JSONObject([("id", 7), ("ok", true),
                                           ("result", .object(JSONObject([("access_token", "gho_abc"), ("expires_at", nil), ("n", .number(-12.5))]))),
                                           ("after", "x")]))
        #expect(try JSON.parse(text) == tree)
        #expect(tree.serializedString == text)
    }

    @Test func framed_fillsTheBigEndianLengthPrefix() {
        var w = JSONWriter(framed: true)
        w.beginObject()
        w.field("k", String(repeating: "v", count: 300))
        w.endObject()
        let frame = w.finish()
        let n = Int(frame[0]) << 24 | Int(frame[1]) << 16 | Int(frame[2]) << 8 | Int(frame[3])
        #expect(n == frame.count - 4)
        #expect(n == 308)
        #expect(frame[4] == UInt8(ascii: "{") && frame.last == UInt8(ascii: "}"))
    }

    @Test("escapes at the start, middle and end of a string", arguments: [
        "\"lead", "mid\\dle", "end\n", "\u{01}", "a\"b\"c", "plain é€😀", "",
    ])
    func strings_escapeExactlyAsTheTreeDoes(s: String) throws {
        var w = JSONWriter()
        w.beginObject()
        w.field("s", s)
        w.endObject()
        let bytes = w.finish()
        #expect(bytes == JSON.object(JSONObject([("s", .string(s))])).serialized())
        #expect(try JSON.parse(bytes)["s"] == .string(s))
    }

    @Test("integers are written exactly, other numbers as Double", arguments: [
        0.0, -0.0, 1, -1, 9, 10, 1_700_000_000, -999_999_999_999_999, 999_999_999_999_999, 1e15, 0.5, -3.25, 1e300,
    ])
    func numbers_surviveARoundTrip(n: Double) throws {
        var out: [UInt8] = []
        JSON.writeNumber(n, to: &out)
        #expect(try JSON.parse(out) == .number(n))
        if n.rounded() == n, abs(n) < 1e15 {
            #expect(String(decoding: out, as: UTF8.self) == String(Int64(n)))
        }
    }

    @Test("maxSerializedCount bounds the serialized size", arguments: [
        JSON.string(String(repeating: "\u{01}", count: 50)), .string("\"\\\n"), .string("plain"), .number(-1.2345678901234567e-300),
        .number(999_999_999_999_999), .null, .bool(false),
        .array([.string("\u{1F}x"), .number(1), .object(JSONObject([("k\u{02}", .string("v\u{03}"))]))]),
    ])
    func maxSerializedCount_isAnUpperBound(value: JSON) {
        #expect(value.serialized().count <= value.maxSerializedCount)
    }
}
