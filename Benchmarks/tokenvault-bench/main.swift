// Benchmarks for TokenVault (`make bench` / scripts/bench.sh runs them and
// docs/performance.md keeps the figures). Not a test: it prints numbers.
@preconcurrency import Glibc
import Foundation
import Synchronization
import TokenVaultClient
import VaultCrypto
import VaultModel
import VaultProtocol
import VaultSecretService
import VaultStore
import VaultSystem

func now() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

func percentile(_ sorted: [Double], _ p: Double) -> Double {
    sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
}

func report(_ name: String, _ value: String) { print("\(name): \(value)") }

func fail(_ message: String) -> Never {
    fputs("tokenvault-bench: \(message)\n", stderr)
    exit(1)
}

func tokenJSON(_ i: Int) -> [UInt8] {
    let access = "gho_" + String(repeating: "a", count: 36) + String(i)
    let refresh = "ghr_" + String(repeating: "b", count: 60) + String(i)
    return Array("{\"access_token\":\"\(access)\",\"token_type\":\"bearer\",\"expires_in\":28800,\"refresh_token\":\"\(refresh)\",\"scope\":\"repo,gist\",\"obtained_at\":1764400000}".utf8)
}

func fileSize(_ path: String) -> Int {
    var st = stat()
    return stat(path, &st) == 0 ? Int(st.st_size) : 0
}

/// Store figures: Argon2id, seal+store, load+open, size per item.
func benchStore(folder: String, count: Int) throws {
    // Argon2id with the interactive limits, as an unlock pays it.
    var times: [Double] = []
    let pass = try SecureBytes(copying: Array("correct horse battery staple".utf8))
    for _ in 0..<5 {
        let t = now()
        _ = try PasswordHash.deriveKey(passphrase: pass, salt: randomBytes(16), parameters: .interactive)
        times.append(now() - t)
    }
    times.sort()
    report("argon2id_interactive_ms_median", String(format: "%.1f", times[2] * 1000))

    let machine = "bench-machine"
    let dbPath = folder + "/vault.db"
    do {
        let store = try SQLiteStore(path: dbPath)
        let vault = try Vault(store: store, keyFiles: KeyFiles(folder: folder), machineID: machine)
        try vault.initialize(passphrase: nil)
        var t = now()
        for i in 0..<count {
            try vault.put(ItemKey(provider: "p\(i % 50)", account: "acct\(i)"), mode: .afterFirstUnlock, secrets: tokenJSON(i), expiresAt: 2e9)
        }
        var dt = now() - t
        report("seal_store_one_txn_each_items_per_s", String(format: "%.0f", Double(count) / dt))
        report("seal_store_one_txn_each_ms_per_item", String(format: "%.3f", dt * 1000 / Double(count)))
        // The same work batched in one transaction (imports, migration).
        let batch = (0..<count).map { i in Vault.NewItem(key: ItemKey(provider: "b\(i % 50)", account: "acct\(i)"), mode: .afterFirstUnlock, secrets: tokenJSON(i), expiresAt: 2e9) }
        t = now()
        try vault.putBatch(batch)
        dt = now() - t
        report("seal_store_batched_items_per_s", String(format: "%.0f", Double(count) / dt))
        for i in 0..<count { try vault.delete(ItemKey(provider: "b\(i % 50)", account: "acct\(i)")) }
        try store.checkpoint()
    }
    // Reopen: load every row, then open every seal.
    let t0 = now()
    let store = try SQLiteStore(path: dbPath)
    let vault = try Vault(store: store, keyFiles: KeyFiles(folder: folder), machineID: machine)
    let loaded = now() - t0
    let items = vault.list()
    let t1 = now()
    var bytes = 0
    for entry in items {
        bytes += try vault.withSecrets(entry.item.key) { _, plain in plain.count }
    }
    let opened = now() - t1
    report("load_all_items_ms", String(format: "%.1f (%d items)", loaded * 1000, items.count))
    report("open_items_per_s", String(format: "%.0f", Double(items.count) / opened))
    report("load_and_open_items_per_s", String(format: "%.0f", Double(items.count) / (loaded + opened)))
    try store.checkpoint()
    let size = fileSize(dbPath)
    report("db_bytes", "\(size)")
    report("db_bytes_per_item", String(format: "%.0f (sealed payload %d bytes + metadata)", Double(size) / Double(items.count), tokenJSON(0).count + AEAD.overhead))
}

/// Creates a vault without a passphrase holding `count` items, in one transaction.
func populate(folder: String, count: Int) throws {
    let store = try SQLiteStore(path: folder + "/vault.db")
    let vault = try Vault(store: store, keyFiles: KeyFiles(folder: folder), machineID: try MachineIdentity.read())
    let modes: [AccessMode] = [.afterFirstUnlock, .always, .whenUnlocked, .alwaysThisDeviceOnly]
    let batch = (0..<count).map { i in
        Vault.NewItem(key: ItemKey(provider: i == 0 ? "bench" : "p\(i % 100)", account: i == 0 ? "default" : "acct\(i)"),
                      mode: i == 0 ? .afterFirstUnlock : modes[i % modes.count], secrets: tokenJSON(i), expiresAt: WallClock.now() + 86400 + Double(i))
    }
    try vault.putBatch(batch)
    try store.checkpoint()
}

/// Round-trip latency of bearer requests on a kept connection.
func latency(socket: String, count: Int) throws {
    let client = TokenVaultClient(socketPath: socket)
    for _ in 0..<1000 { _ = try client.bearerHeader(provider: "bench") }
    var samples: [Double] = []
    samples.reserveCapacity(count)
    for _ in 0..<count {
        let t = now()
        _ = try client.bearerHeader(provider: "bench")
        samples.append(now() - t)
    }
    samples.sort()
    report("bearer_p50_us", String(format: "%.1f", percentile(samples, 0.5) * 1e6))
    report("bearer_p99_us", String(format: "%.1f", percentile(samples, 0.99) * 1e6))
}

/// The sizes of a real bearer request and response, measured on the wire.
func wireSizes(socket: String) throws -> (Int, Int) {
    let request = Message.request(id: 2, op: .token, [("provider", "bench")])
    let conn = try SocketConnection.connect(path: socket)
    let hello = Frame.encode(Message.request(id: 1, op: .hello, [("protocol", 1)]))
    try conn.writeAll(hello)
    var buf = FrameBuffer(maxPayload: Frame.maxResponsePayload)
    var rb = [UInt8](repeating: 0, count: 65536)
    func next() throws -> [UInt8] {
        while true {
            if let f = try buf.next() { return f }
            let n = try conn.read(into: &rb, offset: 0, count: rb.count)
            if n == 0 { fail("daemon closed") }
            buf.append(rb[0..<n])
        }
    }
    _ = try next()
    try conn.writeAll(Frame.encode(request))
    let response = try next()
    return (request.count, response.count)
}

/// A bare Unix-socket echo of the same sizes: the floor to compare with.
func echoServer(path: String, responseSize: Int) throws {
    let listener = try UnixListener.bind(path: path)
    let reply = Frame.encode([UInt8](repeating: UInt8(ascii: "x"), count: responseSize))
    print("ready")
    fflush(stdout)
    // One thread per connection, like the daemon, so the throughput reference is comparable.
    while let conn = try listener.accept(timeoutMs: -1) {
        try spawnThread {
            var buf = FrameBuffer()
            var rb = [UInt8](repeating: 0, count: 65536)
            var timeout: Int32 = 0
            while true {
                while let _ = try? buf.next() { try? conn.writeAll(reply) }
                guard let got = try? conn.read(into: &rb, count: rb.count, timeoutMs: 600_000, currentTimeoutMs: &timeout), got > 0 else { return }
                buf.append(rb[0..<got])
            }
        }
    }
}

func echoLatency(path: String, requestSize: Int, count: Int) throws {
    let conn = try SocketConnection.connect(path: path)
    let request = Frame.encode([UInt8](repeating: UInt8(ascii: "y"), count: requestSize))
    var buf = FrameBuffer()
    var rb = [UInt8](repeating: 0, count: 65536)
    func roundTrip() throws {
        try conn.writeAll(request)
        while true {
            if try buf.next() != nil { return }
            let n = try conn.read(into: &rb, offset: 0, count: rb.count)
            if n == 0 { fail("echo server closed") }
            buf.append(rb[0..<n])
        }
    }
    for _ in 0..<1000 { try roundTrip() }
    var samples: [Double] = []
    for _ in 0..<count {
        let t = now()
        try roundTrip()
        samples.append(now() - t)
    }
    samples.sort()
    report("echo_p50_us", String(format: "%.1f", percentile(samples, 0.5) * 1e6))
    report("echo_p99_us", String(format: "%.1f", percentile(samples, 0.99) * 1e6))
}

/// The same load against the echo server: the throughput floor of the transport.
func echoThroughput(path: String, requestSize: Int, clients: Int, seconds: Double) throws {
    let total = Atomic<Int>(0)
    let deadline = now() + seconds
    let group = DispatchGroup()
    let request = Frame.encode([UInt8](repeating: UInt8(ascii: "y"), count: requestSize))
    for _ in 0..<clients {
        group.enter()
        try spawnThread(stackSize: 1 << 20) {
            defer { group.leave() }
            guard let conn = try? SocketConnection.connect(path: path) else { return }
            var buf = FrameBuffer()
            var rb = [UInt8](repeating: 0, count: 65536)
            var timeout: Int32 = 0
            var n = 0
            while now() < deadline {
                guard (try? conn.writeAll(request)) != nil else { break }
                var got = false
                while !got {
                    if (try? buf.next()) != nil { got = true; break }
                    guard let r = try? conn.read(into: &rb, count: rb.count, timeoutMs: 5000, currentTimeoutMs: &timeout), r > 0 else { return }
                    buf.append(rb[0..<r])
                }
                n += 1
            }
            total.add(n, ordering: .relaxed)
        }
    }
    group.wait()
    report("echo_throughput_requests_per_s", String(format: "%.0f", Double(total.load(ordering: .relaxed)) / seconds))
}

/// Throughput of the daemon alone: clients send a pre-encoded token request
/// and read the answer's frame without decoding it (no client-side JSON).
func rawThroughput(socket: String, clients: Int, seconds: Double) throws {
    let total = Atomic<Int>(0)
    let deadline = now() + seconds
    let group = DispatchGroup()
    let hello = Frame.encode(Message.request(id: 1, op: .hello, [("protocol", 1)]))
    let request = Frame.encode(Message.request(id: 2, op: .token, [("provider", "bench")]))
    for _ in 0..<clients {
        group.enter()
        try spawnThread(stackSize: 1 << 20) {
            defer { group.leave() }
            guard let conn = try? SocketConnection.connect(path: socket) else { return }
            var buf = FrameBuffer(maxPayload: Frame.maxResponsePayload)
            var rb = [UInt8](repeating: 0, count: 65536)
            var timeout: Int32 = 0
            func roundTrip(_ frame: [UInt8]) -> Bool {
                guard (try? conn.writeAll(frame)) != nil else { return false }
                while true {
                    if (try? buf.next()) != nil { return true }
                    guard let r = try? conn.read(into: &rb, count: rb.count, timeoutMs: 5000, currentTimeoutMs: &timeout), r > 0 else { return false }
                    buf.append(rb[0..<r])
                }
            }
            guard roundTrip(hello) else { return }
            var n = 0
            while now() < deadline, roundTrip(request) { n += 1 }
            total.add(n, ordering: .relaxed)
        }
    }
    group.wait()
    report("raw_throughput_requests_per_s", String(format: "%.0f", Double(total.load(ordering: .relaxed)) / seconds))
}

/// Requests per second with `clients` concurrent clients, each on its own thread and connection.
func throughput(socket: String, clients: Int, seconds: Double) throws {
    let total = Atomic<Int>(0)
    let failures = Atomic<Int>(0)
    let deadline = now() + seconds
    let group = DispatchGroup()
    for _ in 0..<clients {
        group.enter()
        try spawnThread(stackSize: 1 << 20) {
            let client = TokenVaultClient(socketPath: socket)
            var n = 0
            while now() < deadline {
                do { _ = try client.bearerHeader(provider: "bench"); n += 1 } catch { failures.add(1, ordering: .relaxed) }
            }
            total.add(n, ordering: .relaxed)
            group.leave()
        }
    }
    group.wait()
    report("throughput_clients", "\(clients)")
    report("throughput_requests_per_s", String(format: "%.0f", Double(total.load(ordering: .relaxed)) / seconds))
    report("throughput_failures", "\(failures.load(ordering: .relaxed))")
}

/// Starts the daemon with NOTIFY_SOCKET and times spawn → READY=1; then RSS.
func startToReady(daemon: String, arguments: [String], socket: String) throws {
    let notifyPath = "/tmp/tvb-notify-\(getpid())"
    unlink(notifyPath)
    let fd = socket_dgram()
    var addr = sockaddr_un()
    addr.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &addr.sun_path) { p in
        for (i, b) in notifyPath.utf8.enumerated() { p[i] = b }
    }
    let r = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
    if r != 0 { fail("bind notify socket") }
    defer { close(fd); unlink(notifyPath) }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: daemon)
    p.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    env["NOTIFY_SOCKET"] = notifyPath
    p.environment = env
    let t = now()
    try p.run()
    var buf = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = recv(fd, &buf, buf.count, 0)
        if n <= 0 { fail("notify socket") }
        if String(decoding: buf[0..<n], as: UTF8.self).contains("READY=1") { break }
    }
    let ready = now() - t
    report("start_to_ready_ms", String(format: "%.1f", ready * 1000))
    let client = TokenVaultClient(socketPath: socket)
    for _ in 0..<10_000 { _ = try client.bearerHeader(provider: "bench") }
    _ = try client.list()
    let status = try String(contentsOfFile: "/proc/\(p.processIdentifier)/status", encoding: .utf8)
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS") || line.hasPrefix("VmHWM") {
        report(String(line.split(separator: ":")[0]).lowercased() + "_after_10k_requests_and_list", line.split(separator: ":")[1].trimmingCharacters(in: .whitespaces))
    }
    kill(p.processIdentifier, SIGTERM)
    p.waitUntilExit()
    report("daemon_exit_status", "\(p.terminationStatus)")
}

/// Secret Service store figures (run inside a private keyring session, see
/// scripts/bench.sh): cold read of one item from each store, and the
/// migration of `count` items each way.
func benchSecretService(folder: String, count: Int) throws {
    let machine = "bench-machine"
    func median(_ xs: [Double]) -> Double { xs.sorted()[xs.count / 2] }
    // Cold read: open the store and the vault, open one item (a daemon start serving its first request).
    let sqlFolder = folder + "/cold-sqlite"
    let ssFolder = folder + "/cold-ss"
    let ssID = StoreMarker.newVaultID()
    do {
        let v = try Vault(store: try SQLiteStore(path: sqlFolder + "/vault.db"), keyFiles: KeyFiles(folder: sqlFolder), machineID: machine)
        try v.put(ItemKey(provider: "bench"), mode: .afterFirstUnlock, secrets: tokenJSON(1), expiresAt: 2e9)
        let ss = try SecretServiceStore(vaultID: ssID)
        let w = try Vault(store: ss, keyFiles: KeyFiles(folder: ssFolder).keepingVaultKey(in: SecretServiceVaultKey(store: ss)), machineID: machine)
        try w.put(ItemKey(provider: "bench"), mode: .afterFirstUnlock, secrets: tokenJSON(1), expiresAt: 2e9)
    }
    var sqlTimes: [Double] = [], ssTimes: [Double] = []
    for _ in 0..<30 {
        var t = now()
        let v = try Vault(store: try SQLiteStore(path: sqlFolder + "/vault.db"), keyFiles: KeyFiles(folder: sqlFolder), machineID: machine)
        _ = try v.withSecrets(ItemKey(provider: "bench")) { _, p in p.count }
        sqlTimes.append(now() - t)
        t = now()
        let ss = try SecretServiceStore(vaultID: ssID)
        let w = try Vault(store: ss, keyFiles: KeyFiles(folder: ssFolder).keepingVaultKey(in: SecretServiceVaultKey(store: ss)), machineID: machine)
        _ = try w.withSecrets(ItemKey(provider: "bench")) { _, p in p.count }
        ssTimes.append(now() - t)
    }
    report("cold_read_one_item_sqlite_ms_median", String(format: "%.2f", median(sqlTimes) * 1000))
    report("cold_read_one_item_secret_service_ms_median", String(format: "%.2f", median(ssTimes) * 1000))
    try SecretServiceStore(vaultID: ssID).destroy()

    // Migration of `count` items, one of every mode in turn (no passphrase, so the vault key moves too).
    let migFolder = folder + "/migrate"
    let sqlite = try SQLiteStore(path: migFolder + "/vault.db")
    let vault = try Vault(store: sqlite, keyFiles: KeyFiles(folder: migFolder), machineID: machine)
    let modes = AccessMode.allCases.filter { $0 != .whenPasscodeSetThisDeviceOnly }
    try vault.putBatch((0..<count).map { i in
        Vault.NewItem(key: ItemKey(provider: "p\(i % 20)", account: "a\(i)"), mode: modes[i % modes.count], secrets: tokenJSON(i), expiresAt: 2e9)
    })
    let ss = try SecretServiceStore(vaultID: StoreMarker.newVaultID(), timeout: .seconds(30))
    var t = now()
    _ = try vault.migrate(to: ss, vaultKey: SecretServiceVaultKey(store: ss)) { () throws(VaultError) in }
    try sqlite.destroy()
    report("migrate_\(count)_items_sqlite_to_secret_service_s", String(format: "%.1f", now() - t))
    let back = try SQLiteStore(path: migFolder + "/vault2.db")
    t = now()
    _ = try vault.migrate(to: back, vaultKey: VaultKeyFile(path: migFolder + "/vault.key")) { () throws(VaultError) in }
    try ss.destroy()
    report("migrate_\(count)_items_secret_service_to_sqlite_s", String(format: "%.1f (including deleting the source items)", now() - t))
}

func socket_dgram() -> Int32 { socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0) }

let args = Array(CommandLine.arguments.dropFirst())
do {
    switch args.first {
    case "store": try benchStore(folder: args[1], count: Int(args[2]) ?? 10_000)
    case "populate": try populate(folder: args[1], count: Int(args[2]) ?? 10_000)
    case "latency": try latency(socket: args[1], count: Int(args[2]) ?? 20_000)
    case "wire-sizes":
        let (q, r) = try wireSizes(socket: args[1])
        print("\(q) \(r)")
    case "echo-server": try echoServer(path: args[1], responseSize: Int(args[2])!)
    case "echo-latency": try echoLatency(path: args[1], requestSize: Int(args[2])!, count: Int(args[3]) ?? 20_000)
    case "throughput": try throughput(socket: args[1], clients: Int(args[2]) ?? 16, seconds: Double(args[3]) ?? 5)
    case "raw-throughput": try rawThroughput(socket: args[1], clients: Int(args[2]) ?? 16, seconds: Double(args[3]) ?? 5)
    case "echo-throughput": try echoThroughput(path: args[1], requestSize: Int(args[2])!, clients: Int(args[3]) ?? 16, seconds: Double(args[4]) ?? 5)
    case "ready": try startToReady(daemon: args[1], arguments: Array(args.dropFirst(3)), socket: args[2])
    case "populate-staggered":
        try populateStaggered(folder: args[1], count: Int(args[2]) ?? 10_000, provider: args[3], minLife: Double(args[4]) ?? 3600, maxLife: Double(args[5]) ?? 7200)
    case "idle": try idle(pid: Int32(args[1])!, seconds: Double(args[2]) ?? 60)
    case "refresh-rate": try refreshRate(socket: args[1], base: args[2], count: Int(args[3]) ?? 200, pid: Int32(args[4])!, clockFile: args[5])
    case "single-flight": try singleFlight(socket: args[1], base: args[2], connections: Int(args[3]) ?? 1000, slow: Double(args[4]) ?? 0)
    case "secret-service": try benchSecretService(folder: args[1], count: Int(args[2]) ?? 1000)
    default:
        fail("usage: tokenvault-bench store DIR N | populate DIR N | latency SOCK N | wire-sizes SOCK | echo-server PATH RESP | echo-latency PATH REQ N | throughput SOCK CLIENTS SECONDS | ready DAEMON SOCK ARGS… | populate-staggered DIR N PROVIDER MIN_S MAX_S | idle PID SECONDS | refresh-rate SOCK BASE N DAEMON_PID CLOCK_FILE | single-flight SOCK BASE CONNECTIONS SLOW_S | secret-service DIR N")
    }
} catch {
    fail("\(error)")
}
