import Testing
import VaultModel
import VaultProtocol

@Suite struct FrameTests {
    @Test func frames_splitAcrossReads_areReassembled() throws {
        let a = Frame.encode(Array(#"{"id":1}"#.utf8)), b = Frame.encode(Array(#"{"id":2}"#.utf8))
        let stream = a + b
        var buf = FrameBuffer()
        var out: [[UInt8]] = []
        for byte in stream {
            buf.append([byte][...])
            while let f = try buf.next() { out.append(f) }
        }
        #expect(out.map { String(decoding: $0, as: UTF8.self) } == [#"{"id":1}"#, #"{"id":2}"#])
        #expect(!buf.hasPartialFrame)
    }

    @Test func frame_overTheLimit_isRejectedBeforeItsBody() {
        var buf = FrameBuffer()
        buf.append([0x00, 0x01, 0x00, 0x01][...])  // 65537 bytes announced
        #expect(throws: FrameError.badLength(65537)) { try buf.next() }
    }

    @Test func frame_ofZeroLength_isRejected() {
        var buf = FrameBuffer()
        buf.append([0, 0, 0, 0][...])
        #expect(throws: FrameError.badLength(0)) { try buf.next() }
    }

    @Test func response_withError_becomesTypedError() throws {
        let bytes = Message.failure(id: .number(7), VaultError(.locked, "github/default is locked"))
        let json = try JSON.parse(bytes)
        #expect(throws: VaultError(.locked, "github/default is locked")) { try Message.result(of: json, expectingID: 7) }
        #expect(throws: VaultError.self) { try Message.result(of: json, expectingID: 8) }
    }

    @Test func request_hasIdOpAndParamsInOrder() {
        let bytes = Message.request(id: 3, op: .token, [("provider", "github")])
        #expect(String(decoding: bytes, as: UTF8.self) == #"{"id":3,"op":"token","provider":"github"}"#)
    }
}
