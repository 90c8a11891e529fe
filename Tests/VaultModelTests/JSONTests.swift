import Testing
import VaultModel

/// The JSON contract of RFC 8259 as `VaultModel.JSON` implements it: what it
/// accepts, what it writes, and every kind of bad input it must refuse.
@Suite("JSON")
struct JSONTests {
    // MARK: - Round trips

    @Test("compact texts serialize back byte for byte", arguments: [
        #"null"#, #"true"#, #"false"#, #"0"#, #"-7"#, #"1.5"#, #""""#, #""text""#,
        #"[]"#, #"{}"#, #"[1,"two",null,true,[],{}]"#,
        #"{"access_token":"abc","expires_in":3600,"scope":["a","b"],"nested":{"x":null}}"#,
        #""line\nbreak\ttab\rcr\"quote\\backslash""#,
        #""\u0000\u0001\u001f""#,
    ])
    func parse_thenSerialize_givesTheSameCompactText(text: String) throws {
        let value = try JSON.parse(text)
        #expect(value.serializedString == text)
    }

    @Test func parse_withWhitespaceAroundAndBetweenTokens_givesTheSameValueAsCompactText() throws {
        let spaced = " \t\r\n{ \"a\" : [ 1 , 2 ] ,\n \"b\" : { } } \n"
        #expect(try JSON.parse(spaced) == JSON.parse(#"{"a":[1,2],"b":{}}"#))
    }

    @Test func object_keepsKeysInInsertionOrder_throughParseAndSerialize() throws {
        let text = #"{"zeta":1,"alpha":2,"mid":3}"#
        let value = try JSON.parse(text)
        #expect(value.objectValue?.keys == ["zeta", "alpha", "mid"])
        #expect(value.serializedString == text)
    }

    @Test("numbers survive serialize then parse", arguments: [
        0.0, 1, -1, 42, 3600, 1.5, -2.25, 0.1, 123_456_789_012_345, 1e15, -1e15, 1e20,
        .leastNonzeroMagnitude, 2.5e-8, 9_007_199_254_740_992, .greatestFiniteMagnitude,
    ] as [Double])
    func number_serializedThenParsed_isTheSameDouble(n: Double) throws {
        let back = try JSON.parse(JSON.number(n).serialized())
        #expect(back == .number(n))
    }

    @Test func value_serializedThenParsed_isEqual() throws {
        let value = JSON.object(JSONObject([
            ("s", .string("quote \" backslash \\ slash / controls \u{01}\u{08}\u{0C}\u{1F} del \u{7F} é € 😀")),
            ("n", .number(-12.5)),
            ("a", .array([.null, .bool(true), .bool(false), .array([]), .object(JSONObject())])),
            ("", .string("")),
        ]))
        #expect(try JSON.parse(value.serialized()) == value)
    }

    // MARK: - Escapes and Unicode

    @Test func string_withEveryShortEscape_decodesToTheControlCharacters() throws {
        let value = try JSON.parse(#""\"\\\/\b\f\n\r\t""#)
        #expect(value == .string("\"\\/\u{08}\u{0C}\n\r\t"))
    }

    @Test func string_withUnicodeEscapes_decodesBMPCharactersInEitherCase() throws {
        #expect(try JSON.parse(#""\u00e9\u00E9\u20ac\u0041""#) == .string("éé€A"))
    }

    @Test func string_withSurrogatePairEscape_decodesToOneScalarOutsideTheBMP() throws {
        let value = try JSON.parse(#""\uD83D\uDE00 and \ud834\udd1e""#)
        #expect(value == .string("😀 and 𝄞"))
        #expect(value.stringValue?.unicodeScalars.first?.value == 0x1F600)
    }

    @Test func string_withRawMultibyteUTF8_isKeptAsIs() throws {
        let text = "\"é€😀\""
        #expect(try JSON.parse(Array(text.utf8)) == .string("é€😀"))
    }

    @Test func serialize_stringWithControlCharacters_escapesThemAndNothingElse() {
        let out = JSON.string("a\u{00}b\u{1F}c\nd\"e\\f/g é").serializedString
        #expect(out == #""a\u0000b\u001fc\nd\"e\\f/g é""#)
    }

    @Test("unpaired or malformed surrogate escapes are refused", arguments: [
        #""\uD800""#, #""\uDC00""#, #""\uD800\u0041""#, #""\uD800x""#, #""\uDBFF\uDBFF""#, #""\uD83D""#,
    ])
    func parse_withBadSurrogateEscape_throws(text: String) {
        #expect(throws: JSONParseError.self) { try JSON.parse(text) }
    }

    @Test("invalid escapes are refused", arguments: [
        #""\x41""#, #""\u12""#, #""\u12G4""#, #""\'""#, #""\""#, #""abc\"#, #""\U0041""#,
    ])
    func parse_withInvalidEscape_throws(text: String) {
        #expect(throws: JSONParseError.self) { try JSON.parse(text) }
    }

    // MARK: - Rejects

    @Test("trailing data after the value is refused", arguments: [
        "{} x", "1 2", "[1]]", "nullx", "truefalse", "\"a\"\"b\"", "{}{}", "0 0", "[1] ,",
    ])
    func parse_withTrailingGarbage_throws(text: String) throws {
        let error = try #require(throws: JSONParseError.self) { try JSON.parse(text) }
        #expect(error.offset > 0)
    }

    @Test func parse_withTrailingGarbage_reportsTheOffsetOfTheGarbage() throws {
        let error = try #require(throws: JSONParseError.self) { try JSON.parse("[1,2] x") }
        #expect(error.offset == 6)
        #expect(error.description.contains("byte 6"))
    }

    @Test("duplicate keys are refused", arguments: [
        #"{"a":1,"a":2}"#, #"{"a":1,"b":2,"a":1}"#, #"{"outer":{"k":true,"k":true}}"#, #"[{"x":1,"x":1}]"#,
        #"{"\u0061":1,"a":2}"#,
    ])
    func parse_withDuplicateKeys_throws(text: String) throws {
        let error = try #require(throws: JSONParseError.self) { try JSON.parse(text) }
        #expect(error.reason.contains("duplicate"))
    }

    @Test("raw control characters inside strings are refused", arguments: [0x00, 0x01, 0x09, 0x0A, 0x0D, 0x1F] as [UInt8])
    func parse_withRawControlCharacterInString_throws(byte: UInt8) {
        let fast: [UInt8] = [0x22, 0x61, byte, 0x62, 0x22]
        let afterEscape: [UInt8] = [0x22, 0x5C, 0x6E, byte, 0x22]
        let inKey: [UInt8] = Array(#"{"k"#.utf8) + [byte] + Array(#"":1}"#.utf8)
        for input in [fast, afterEscape, inKey] {
            #expect(throws: JSONParseError.self) { try JSON.parse(input) }
        }
    }

    @Test("malformed numbers are refused", arguments: [
        "01", "-01", "00", "-", "--1", "+1", "1.", ".5", "-.5", "1.e3", "1e", "1e+", "1E-", "0x10", "1_000",
        "NaN", "Infinity", "-Infinity", "1e400", "-1e400", "- 1", "[01]", "[1.]", #"{"n":-}"#,
    ])
    func parse_withBadNumber_throws(text: String) {
        #expect(throws: JSONParseError.self) { try JSON.parse(text) }
    }

    @Test("well-formed numbers are accepted", arguments: [
        ("0", 0.0), ("-0", 0.0), ("10", 10), ("-3.25", -3.25), ("1e3", 1000), ("1E+3", 1000), ("25e-1", 2.5), ("0.5e1", 5),
    ] as [(String, Double)])
    func parse_withGoodNumber_givesItsValue(text: String, value: Double) throws {
        #expect(try JSON.parse(text) == .number(value))
    }

    @Test func parse_nestingExactlyMaxDepth_isAccepted() throws {
        let arrays = String(repeating: "[", count: JSON.maxDepth) + "1" + String(repeating: "]", count: JSON.maxDepth)
        var value = try JSON.parse(arrays)
        var depth = 0
        while case .array(let inner) = value { depth += 1; value = inner[0] }
        #expect(depth == JSON.maxDepth)
        #expect(value == .number(1))

        let objects = String(repeating: #"{"k":"#, count: JSON.maxDepth) + "null" + String(repeating: "}", count: JSON.maxDepth)
        _ = try JSON.parse(objects)
    }

    @Test func parse_nestingOneDeeperThanMaxDepth_isRefused() throws {
        let arrays = String(repeating: "[", count: JSON.maxDepth + 1) + String(repeating: "]", count: JSON.maxDepth + 1)
        let error = try #require(throws: JSONParseError.self) { try JSON.parse(arrays) }
        #expect(error.reason.contains("nesting"))

        let objects = String(repeating: #"{"k":"#, count: JSON.maxDepth + 1) + "1" + String(repeating: "}", count: JSON.maxDepth + 1)
        #expect(throws: JSONParseError.self) { try JSON.parse(objects) }

        let mixed = String(repeating: #"[{"k":"#, count: (JSON.maxDepth + 2) / 2) + "0" + String(repeating: "}]", count: (JSON.maxDepth + 2) / 2)
        #expect(throws: JSONParseError.self) { try JSON.parse(mixed) }
    }

    @Test func parse_hugelyDeepNesting_throwsInsteadOfOverflowingTheStack() {
        let text = String(repeating: "[", count: 200_000)
        #expect(throws: JSONParseError.self) { try JSON.parse(text) }
    }

    @Test("invalid UTF-8 in a string is refused", arguments: [
        [0xFF], [0x80], [0xC3], [0xC0, 0xAF], [0xE0, 0x80, 0xAF], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80],
        [0xF5, 0x80, 0x80, 0x80], [0xE2, 0x82], [0x61, 0xFE, 0x62],
    ] as [[UInt8]])
    func parse_withInvalidUTF8InString_throws(bad: [UInt8]) throws {
        let plain: [UInt8] = [0x22] + bad + [0x22]
        let withEscape: [UInt8] = Array(#""\n"#.utf8) + bad + [0x22]
        let asKey: [UInt8] = [0x7B, 0x22] + bad + Array(#"":1}"#.utf8)
        for input in [plain, withEscape, asKey] {
            let error = try #require(throws: JSONParseError.self) { try JSON.parse(input) }
            #expect(error.reason.contains("UTF-8"))
        }
    }

    @Test func parse_withNonASCIIBytesOutsideStrings_throws() {
        #expect(throws: JSONParseError.self) { try JSON.parse([0xEF, 0xBB, 0xBF] + Array("{}".utf8)) }
        #expect(throws: JSONParseError.self) { try JSON.parse(Array("[1,".utf8) + [0xC3, 0xA9] + Array("]".utf8)) }
    }

    @Test("truncated or structurally broken texts are refused", arguments: [
        "", " ", "[", "{", "[1,", "[1,]", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{a:1}", "{'a':1}", "\"open",
        "tru", "nul", "fals", "[1 2]", "{\"a\":1 \"b\":2}", "]", "}", ",",
    ])
    func parse_withBrokenStructure_throws(text: String) {
        #expect(throws: JSONParseError.self) { try JSON.parse(text) }
    }
}
