@preconcurrency import Glibc
import Foundation
import Testing
import VaultModel
import VaultStore

/// Crash safety: a writer killed with SIGKILL at random moments never loses
/// an item it reported as committed, and never leaves a damaged file.
@Suite("Crash safety")
struct CrashSafetyTests {
    /// Same identity as the writer uses.
    static let writerMachineID = "crash-writer-machine"
    static let minimumKills = 220

    /// `vault-crash-writer` in the build products folder, which also holds the test runner.
    static func writerPath() -> String? {
        var candidates: [String] = []
        if let explicit = ProcessInfo.processInfo.environment["VAULT_CRASH_WRITER"] { candidates.append(explicit) }
        if let runner = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            candidates.append((runner as NSString).deletingLastPathComponent + "/vault-crash-writer")
        }
        let argv0 = CommandLine.arguments[0]
        if argv0.contains("/") { candidates.append((argv0 as NSString).deletingLastPathComponent + "/vault-crash-writer") }
        candidates.append(Bundle.main.bundleURL.appendingPathComponent("vault-crash-writer").path)
        // The package's own .build folder, from this file's path.
        let package = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        for configuration in ["debug", "release"] { candidates.append(package.appendingPathComponent(".build/\(configuration)/vault-crash-writer").path) }
        return candidates.first { access($0, X_OK) == 0 }
    }

    /// One run of the writer: a child process whose standard output is a pipe.
    final class Writer {
        let pid: pid_t
        let output: Int32
        var buffer: [UInt8] = []
        var lines: [String] = []

        init(executable: String, folder: String) throws {
            var fds: [Int32] = [0, 0]
            guard pipe(&fds) == 0 else { throw TestSetupError("pipe: \(String(cString: strerror(errno)))") }
            for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
            posix_spawn_file_actions_addopen(&actions, 2, folder + "/writer.stderr", O_WRONLY | O_CREAT | O_APPEND, 0o600)
            // Keep other tests' descriptors (the pipes of their children) out of the writer.
            if let closeFrom = Self.addCloseFrom { _ = closeFrom(&actions, 3) }
            let argv: [UnsafeMutablePointer<CChar>?] = [strdup(executable), strdup(folder), nil]
            defer { for p in argv { free(p) } }
            var child: pid_t = 0
            let rc = posix_spawn(&child, executable, &actions, nil, argv, environ)
            close(fds[1])
            guard rc == 0 else {
                close(fds[0])
                throw TestSetupError("posix_spawn \(executable): \(String(cString: strerror(rc)))")
            }
            pid = child
            output = fds[0]
        }

        deinit { close(output) }

        /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34+), which
        /// `import Glibc` does not show (it needs `_GNU_SOURCE`).
        static let addCloseFrom: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)? = {
            guard let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") else { return nil }
            return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
        }()

        /// Reads what is there until `deadline` or end of file; returns false at end of file.
        @discardableResult
        func read(until deadline: ContinuousClock.Instant, stopWhen done: ([String]) -> Bool = { _ in false }) -> Bool {
            var chunk = [UInt8](repeating: 0, count: 4096)
            while !done(lines) {
                let left = deadline - .now
                if left <= .zero { return true }
                var pfd = pollfd(fd: output, events: Int16(POLLIN), revents: 0)
                let ms = Int32(min(left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1, 10_000))
                let ready = poll(&pfd, 1, ms)
                if ready < 0 && errno == EINTR { continue }
                if ready <= 0 { continue }
                let n = chunk.withUnsafeMutableBytes { Glibc.read(output, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { return false }
                buffer += chunk[0..<n]
                while let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                    lines.append(String(decoding: buffer[..<newline], as: UTF8.self))
                    buffer.removeSubrange(...newline)
                }
            }
            return true
        }

        /// SIGKILL, then everything it printed before dying, then its status.
        func kill() -> Int32 {
            _ = Glibc.kill(pid, SIGKILL)
            read(until: .now + .seconds(30))
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
            return status
        }
    }

    /// What the test knows from the lines the writers printed.
    struct Ledger {
        /// Items reported committed, with their last reported version.
        var versions: [String: Int] = [:]
        /// Items whose delete started but was not reported done: either state is right.
        var maybeDeleted: [String: Int] = [:]
        /// Items reported deleted.
        var deleted: Set<String> = []
        var puts = 0
        var deletes = 0

        mutating func record(_ line: String) throws {
            let parts = line.split(separator: " ").map(String.init)
            switch (parts.first, parts.count) {
            case ("ready", 2):
                // Every index below the writer's start is one it saw stored or deleted.
                guard let start = Int(parts[1]) else { throw TestSetupError("bad line \(line)") }
                for account in versions.keys {
                    let index = Int(account.dropFirst("acct-".count))!
                    if index >= start { Issue.record("writer resumed at \(start) but \(account) was reported committed") }
                }
            case ("put", 3):
                guard let version = Int(parts[2]) else { throw TestSetupError("bad line \(line)") }
                versions[parts[1]] = version
                puts += 1
            case ("deleting", 2):
                guard let version = versions.removeValue(forKey: parts[1]) else { throw TestSetupError("\(line) of an unknown item") }
                maybeDeleted[parts[1]] = version
            case ("del", 2):
                guard maybeDeleted.removeValue(forKey: parts[1]) != nil else { throw TestSetupError("\(line) without deleting") }
                deleted.insert(parts[1])
                deletes += 1
            default:
                throw TestSetupError("unexpected line from the writer: \(line)")
            }
        }
    }

    @Test(.timeLimit(.minutes(2)))
    func writer_killedAtRandomMomentsManyTimes_keepsEveryCommittedItemAndAnIntactFile() throws {
        let executable = try #require(Self.writerPath(), "vault-crash-writer not found next to the test runner; build it with `swift build`")
        try withVaultFolder { folder in
            var ledger = Ledger()
            var rng = SystemRandomNumberGenerator()
            let started = ContinuousClock.now
            var killsDuringWrites = 0
            for round in 0..<Self.minimumKills {
                let writer = try Writer(executable: executable, folder: folder.path)
                let spawned = ContinuousClock.now
                if round % 4 == 0 {
                    // Anywhere from start-up (opening, creating the vault) on.
                    writer.read(until: spawned + .milliseconds(Int.random(in: 1...50, using: &rng)))
                } else {
                    // In the middle of the writes: after the first commit, then a random while.
                    writer.read(until: spawned + .seconds(20)) { $0.contains { $0.hasPrefix("put ") } }
                    writer.read(until: .now + .microseconds(Int.random(in: 0...40_000, using: &rng)))
                    killsDuringWrites += 1
                }
                let status = writer.kill()
                let signalled = (status & 0x7F) != 0 && (status & 0x7F) != 0x7F
                if !(signalled && (status & 0x7F) == SIGKILL) {
                    let stderr = fileBytes(folder.path + "/writer.stderr").map { String(decoding: $0, as: UTF8.self) } ?? ""
                    Issue.record("round \(round): the writer ended by itself (status \(status)) instead of being killed: \(stderr)")
                    return
                }
                for line in writer.lines { try ledger.record(line) }
            }
            let elapsed = ContinuousClock.now - started

            #expect(ledger.puts >= Self.minimumKills, "too few writes between kills to mean much (\(ledger.puts))")
            #expect(ledger.deletes > 0)
            #expect(killsDuringWrites >= Self.minimumKills / 2)

            let (store, vault) = try folder.open(machineID: Self.writerMachineID)
            #expect(try store.integrityCheck() == "ok")
            let present = ledger.versions.map { ($0.key, $0.value) }
                + ledger.maybeDeleted.filter { vault.item(ItemKey(provider: "crash", account: $0.key)) != nil }.map { ($0.key, $0.value) }
            for (account, version) in present.sorted(by: { $0.0 < $1.0 }) {
                let key = ItemKey(provider: "crash", account: account)
                do {
                    let text = try vault.secretText(key)
                    let prefix = "s:\(account):v"
                    #expect(text.hasPrefix(prefix), "\(account) holds another item's secret")
                    // A version written after the last line that reached us may have committed too.
                    let stored = Int(text.dropFirst(prefix.count).prefix { $0 != ":" }) ?? 0
                    #expect(stored >= version, "\(account) went back from version \(version) to \(stored)")
                } catch {
                    Issue.record("committed item \(account) does not open: \(error)")
                }
            }
            for account in ledger.deleted {
                #expect(vault.item(ItemKey(provider: "crash", account: account)) == nil, "deleted \(account) came back")
            }
            print("crash test: \(Self.minimumKills) kills, \(ledger.puts) puts and \(ledger.deletes) deletes confirmed, \(present.count) items checked, \(elapsed)")
        }
    }
}
