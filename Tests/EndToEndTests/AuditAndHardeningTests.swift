@preconcurrency import Glibc
import Foundation
import Testing
import TokenVaultClient

/// What the daemon leaves behind: audit lines without tokens, no core
/// dumps (PRODUCT.md sections 5 and 7).
extension EndToEnd {
    @Suite struct AuditAndHardening {
        @Test func auditLog_hasALinePerServedTokenWithProviderAndPid_andNeverTheToken() throws {
            let h = try DaemonHarness(daemonEnvironment: ["TOKENVAULT_LOG_LEVEL": "debug"])
            defer { h.finish() }
            try h.start()
            let token = try h.addToken("audited")
            let other = try h.addToken("quiet")

            var pids: [Int32] = []
            for verb in ["token", "header", "token"] {
                let r = try h.vaultctl([verb, "audited"])
                #expect(r.status == 0, "\(r)")
                pids.append(r.pid)
            }
            let client = TokenVaultClient(socketPath: h.socketPath)
            #expect(try client.token(provider: "audited").accessToken == token)
            pids.append(getpid())
            // Refused requests are not "served".
            #expect(try h.vaultctl(["token", "audited", "--min-validity", "7200"]).status == 5)
            #expect(try h.vaultctl(["token", "nosuch"]).status == 3)

            let audit = try String(contentsOfFile: h.auditLogPath, encoding: .utf8)
            let served = audit.split(separator: "\n").filter { $0.contains(" served ") }
            #expect(served.count == 4, "one line per served token:\n\(audit)")
            for (line, pid) in zip(served, pids) {
                #expect(line.contains("provider=audited") && line.contains("account=default"), "\(line)")
                #expect(line.contains("pid=\(pid) "), "the line names the client's pid \(pid): \(line)")
                #expect(line.contains("exe=/"), "the line names the client's executable: \(line)")
            }
            #expect(!audit.contains("provider=quiet") || !audit.contains("served provider=quiet"), "nothing served for quiet")
            #expect(!audit.contains(token) && !audit.contains(other))
            var st = stat()
            #expect(stat(h.auditLogPath, &st) == 0 && st.st_mode & 0o777 == 0o600, "the audit log is 0600")
            // Even at debug level, no token in the daemon's log.
            #expect(!h.daemonLog.isEmpty)
            #expect(!h.daemonLog.contains(token) && !h.daemonLog.contains(other))
        }

        @Test func daemon_runsWithCoreDumpsOff() throws {
            let h = try DaemonHarness()
            defer { h.finish() }
            try h.start()
            let limits = try String(contentsOfFile: "/proc/\(h.daemonPID)/limits", encoding: .utf8)
            let line = try #require(limits.split(separator: "\n").first { $0.hasPrefix("Max core file size") }, "\(limits)")
            let fields = line.dropFirst("Max core file size".count).split(separator: " ")
            #expect(fields.count >= 2 && fields[0] == "0" && fields[1] == "0", "soft and hard RLIMIT_CORE are 0: \(line)")
            #expect(!h.daemonLog.contains("core dumps could not be disabled"))
        }
    }
}
