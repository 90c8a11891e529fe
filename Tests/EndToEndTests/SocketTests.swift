@preconcurrency import Glibc
import Foundation
import Testing
import TokenVaultClient

/// Bad, slow, greedy and foreign peers on the socket (PRODUCT.md sections 5 and 8).
extension EndToEnd {
    @Suite struct Socket {
        /// A daemon whose frames must be complete within one second.
        static func fastTimeoutDaemon() throws -> DaemonHarness {
            try DaemonHarness(daemonEnvironment: ["TOKENVAULT_FRAME_TIMEOUT_MS": "1000"])
        }

        @Test func garbageAndMalformedFrames_getAnErrorFrameThenClose() throws {
            let h = try Self.fastTimeoutDaemon()
            defer { h.finish() }
            try h.start()
            let token = try h.addToken("steady")

            let helloPaddedToMax = Array(#"{"id":0,"op":"hello","protocol":1}"#.utf8)
            let cases: [(String, [UInt8])] = [
                ("text that is not a frame", Array("GET / HTTP/1.1\r\nHost: tokenvault\r\n\r\n".utf8)),
                ("a frame holding invalid JSON", RawSocket.frame("{\"id\":0,\"op\":")),
                ("a frame holding binary bytes", RawSocket.frame([0xFF, 0xFE, 0x00, 0x01, 0x80])),
                ("a frame holding a JSON array", RawSocket.frame("[1,2,3]")),
                ("a request without an id", RawSocket.frame(#"{"op":"hello","protocol":1}"#)),
                ("a first request that is not hello", RawSocket.frame(#"{"id":1,"op":"token","provider":"steady"}"#)),
                ("a hello for protocol 99", RawSocket.frame(#"{"id":0,"op":"hello","protocol":99}"#)),
                ("a zero-length frame", [0, 0, 0, 0]),
                ("a length of 65537", [0x00, 0x01, 0x00, 0x01] + helloPaddedToMax),
                ("a length of 4 GiB - 1", [0xFF, 0xFF, 0xFF, 0xFF] + helloPaddedToMax),
            ]
            for (what, bytes) in cases {
                let s = try RawSocket(path: h.socketPath)
                s.send(bytes)
                let reply = try #require(s.readUntilClosed(timeout: .seconds(3)), "\(what): the daemon closes the connection")
                let frames = try RawSocket.decodeFrames(reply)
                #expect(frames.count == 1, "\(what): one error frame before the close, got \(frames)")
                #expect(frames.first?["ok"] as? Bool == false, "\(what)")
                #expect(RawSocket.errorCode(frames.first) == "protocol", "\(what): \(frames)")
                #expect(frames.first?["result"] == nil)
            }

            // A frame of exactly 64 KiB is within the limit: a hello padded with spaces is answered.
            let padded = helloPaddedToMax + [UInt8](repeating: 0x20, count: 65536 - helloPaddedToMax.count)
            let big = try RawSocket(path: h.socketPath)
            big.send(RawSocket.frame(padded))
            let answer = try #require(try big.readFrame(timeout: .seconds(5)), "a 65536-byte frame is answered")
            #expect(answer["ok"] as? Bool == true, "\(answer)")
            // Pipelined requests in one write are all answered, in order.
            let pipelined = try RawSocket(path: h.socketPath)
            pipelined.send(RawSocket.hello + RawSocket.frame(#"{"id":7,"op":"status"}"#) + RawSocket.frame(#"{"id":8,"op":"nonsense"}"#))
            let r0 = try #require(try pipelined.readFrame(timeout: .seconds(5)))
            let r7 = try #require(try pipelined.readFrame(timeout: .seconds(5)))
            let r8 = try #require(try pipelined.readFrame(timeout: .seconds(5)))
            #expect(r0["id"] as? Int == 0 && r7["id"] as? Int == 7 && r8["id"] as? Int == 8)
            #expect(r7["ok"] as? Bool == true)
            #expect(r8["ok"] as? Bool == false, "an unknown operation is an error, not a close")
            #expect(pipelined.read(timeout: .milliseconds(50)) == .timedOut, "the connection stays open after a well-formed bad request")

            // None of it disturbed the daemon.
            #expect(try h.vaultctl(["token", "steady"]).stdout == token + "\n")
        }

        @Test func truncatedFrameThenSilence_isClosedAfterTheFrameTimeout() throws {
            let h = try Self.fastTimeoutDaemon()
            defer { h.finish() }
            try h.start()
            let token = try h.addToken("steady")

            let s = try RawSocket(path: h.socketPath)
            let started = ContinuousClock.now
            s.send(Array(RawSocket.hello.prefix(12)))
            let reply = try #require(s.readUntilClosed(timeout: .seconds(6)), "a truncated frame is not waited for forever")
            let waited = started.duration(to: .now)
            #expect(waited >= .milliseconds(900) && waited < .seconds(3), "closed after the 1 s frame timeout, not \(waited)")
            let frames = try RawSocket.decodeFrames(reply)
            #expect(RawSocket.errorCode(frames.first) == "protocol", "\(frames)")

            // An idle connection that has sent nothing is not a partial frame: it stays.
            let idle = try RawSocket(path: h.socketPath)
            #expect(idle.read(timeout: .milliseconds(1500)) == .timedOut, "an idle connection is not cut by the frame timeout")
            #expect(try h.vaultctl(["token", "steady"]).stdout == token + "\n")
        }

        @Test func clientSendingOneBytePer300ms_isClosedAfterTheFrameTimeout() throws {
            let h = try Self.fastTimeoutDaemon()
            defer { h.finish() }
            try h.start()
            let token = try h.addToken("steady")
            let client = TokenVaultClient(socketPath: h.socketPath, timeout: 5)

            let s = try RawSocket(path: h.socketPath)
            let bytes = RawSocket.hello
            var sent = 0
            var closedAfter: Duration?
            let started = ContinuousClock.now
            var reply: [UInt8] = []
            while sent < bytes.count {
                guard s.send([bytes[sent]]) else { closedAfter = started.duration(to: .now); break }
                sent += 1
                // The other clients are served meanwhile.
                #expect(try client.token(provider: "steady").accessToken == token)
                let outcome = s.read(timeout: .milliseconds(300))
                if outcome == .timedOut { continue }
                if case .data(let d) = outcome { reply = d + (s.readUntilClosed(timeout: .seconds(2)) ?? []) }
                closedAfter = started.duration(to: .now)
                break
            }
            let elapsed = try #require(closedAfter, "the slow client was never cut off (sent all \(bytes.count) bytes)")
            #expect(sent < bytes.count)
            #expect(elapsed >= .milliseconds(900) && elapsed < .seconds(3), "closed after the 1 s frame timeout, not \(elapsed)")
            if !reply.isEmpty {
                #expect(RawSocket.errorCode(try RawSocket.decodeFrames(reply).first) == "protocol")
            }
            #expect(try client.token(provider: "steady").accessToken == token)
        }

        @Test func twoHundredIdleConnections_doNotStopAWellBehavedClient() throws {
            let h = try Self.fastTimeoutDaemon()
            defer { h.finish() }
            try h.start()
            let token = try h.addToken("steady")

            var idle: [RawSocket] = []
            for i in 0..<200 {
                let s = try RawSocket(path: h.socketPath)
                if i % 2 == 0 {
                    // Half of them say hello first, then go quiet.
                    s.send(RawSocket.hello)
                    let hello = try #require(try s.readFrame(timeout: .seconds(5)), "connection \(i) is answered")
                    #expect(hello["ok"] as? Bool == true)
                }
                idle.append(s)
            }

            let started = ContinuousClock.now
            let client = TokenVaultClient(socketPath: h.socketPath, timeout: 5)
            var served = 0
            for _ in 0..<100 {
                if try client.token(provider: "steady").accessToken == token { served += 1 }
            }
            for _ in 0..<20 {
                // New connections are still accepted.
                if try TokenVaultClient(socketPath: h.socketPath, timeout: 5).bearerHeader(provider: "steady") == "Bearer " + token { served += 1 }
            }
            #expect(served == 120)
            #expect(try h.vaultctl(["token", "steady"]).stdout == token + "\n")
            let took = started.duration(to: .now)
            #expect(took < .seconds(15), "120 requests beside 200 idle connections took \(took)")

            // The idle ones were left alone (the idle timeout is minutes).
            for s in idle { #expect(s.read(timeout: .zero) == .timedOut) }
            idle.removeAll()
            #expect(try client.list().count == 1)
        }

        @Test func connectionsBeyondTheLimit_areToldToRetryLater() throws {
            let h = try DaemonHarness(daemonEnvironment: ["TOKENVAULT_MAX_CONNECTIONS": "3"])
            defer { h.finish() }
            try h.start()
            let token = try h.addToken("steady")
            var greedy: [RawSocket] = []
            for _ in 0..<3 {
                let s = try RawSocket(path: h.socketPath)
                s.send(RawSocket.hello)
                #expect(try s.readFrame(timeout: .seconds(5))?["ok"] as? Bool == true)
                greedy.append(s)
            }
            let refused = try h.vaultctl(["token", "steady"])
            #expect(refused.status == 75, "the daemon is full: retry later, \(refused)")
            #expect(refused.stderr.contains("too many connections"))
            #expect(refused.stdout.isEmpty)
            greedy.removeLast()
            try waitFor("the daemon to notice a connection closed", timeout: .seconds(10)) {
                try h.vaultctl(["token", "steady"]).status == 0
            }
            #expect(try h.vaultctl(["token", "steady"]).stdout == token + "\n")
        }

        @Test(.enabled(if: OtherUser.available, "needs root, setpriv and the user tokenvault-test (scripts/test.sh creates it)"))
        func clientOfAnotherUid_isRefused() throws {
            let h = try DaemonHarness()
            defer { h.finish() }
            try h.start()
            let token = try h.addToken("mine")
            let uid = try #require(OtherUser.uid)
            #expect(uid != getuid())

            // Only the daemon's uid check stands between the other user and the socket.
            for (path, mode) in [(h.folder, 0o711), (h.runtimeDir, 0o711), (h.runtimeDir + "/tokenvault", 0o755), (h.socketPath, 0o666)] {
                #expect(chmod(path, mode_t(mode)) == 0, "chmod \(path)")
            }
            let setpriv = try #require(PackagePaths.executable("setpriv"))
            let asOther = ["--reuid=\(OtherUser.name)", "--regid=\(OtherUser.name)", "--clear-groups", PackagePaths.vaultctl, "--socket", h.socketPath]
            for _ in 0..<5 {
                let list = try h.run(setpriv, asOther + ["list"])
                #expect(list.status == 77, "another uid is denied: \(list)")
                #expect(!list.stdout.contains("mine"))
                #expect(list.stderr.contains("only uid \(getuid())"), "\(list)")
                let stolen = try h.run(setpriv, asOther + ["token", "mine"])
                #expect(stolen.status == 77, "\(stolen)")
                #expect(!stolen.stdout.contains(token))
            }
            #expect(h.daemonLog.contains("refused a connection from uid \(uid)"), "the daemon log names the refused uid:\n\(h.daemonLog)")
            let audit = (try? String(contentsOfFile: h.auditLogPath, encoding: .utf8)) ?? ""
            #expect(!audit.contains("served provider=mine"), "nothing was served to the other uid")
            // The owner still is.
            #expect(try h.vaultctl(["token", "mine"]).stdout == token + "\n")
        }
    }
}

/// The unprivileged user scripts/test.sh creates for the SO_PEERCRED test.
enum OtherUser {
    static let name = "tokenvault-test"
    static var uid: uid_t? { getpwnam(name).map { $0.pointee.pw_uid } }
    static var available: Bool { getuid() == 0 && uid != nil && PackagePaths.executable("setpriv") != nil }
}
