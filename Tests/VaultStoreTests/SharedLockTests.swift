@preconcurrency import Glibc
import Synchronization
import Testing
import VaultSystem

/// The readers-writer lock that guards the vault's state.
@Suite("SharedLock")
struct SharedLockTests {
    /// Writers exclude each other: no increment is lost.
    @Test func writersAreExclusive() throws {
        let lock = SharedLock(0)
        let done = Atomic(0)
        let threads = 8, perThread = 20_000
        for _ in 0..<threads {
            try spawnThread {
                for _ in 0..<perThread { lock.withLock { $0 += 1 } }
                done.add(1, ordering: .releasing)
            }
        }
        while done.load(ordering: .acquiring) < threads { usleep(1000) }
        #expect(lock.read { $0 } == threads * perThread)
    }

    /// Readers share the lock: a reader inside `read` lets a second reader
    /// in (with a mutex the first would wait for the second forever).
    @Test func readersRunTogether() throws {
        let lock = SharedLock("state")
        let firstInside = Atomic(false)
        let secondIn = Atomic(false)
        try spawnThread {
            lock.read { _ in
                firstInside.store(true, ordering: .releasing)
                // Stay inside until the main thread's reader got in too (at most 5 s).
                for _ in 0..<5000 where !secondIn.load(ordering: .acquiring) { usleep(1000) }
                firstInside.store(false, ordering: .releasing)
            }
        }
        while !firstInside.load(ordering: .acquiring) { usleep(1000) }
        let (seen, overlapped) = lock.read { value -> (String, Bool) in
            let overlapped = firstInside.load(ordering: .acquiring)
            secondIn.store(true, ordering: .releasing)
            return (value, overlapped)
        }
        #expect(seen == "state")
        #expect(overlapped, "the second reader had to wait for the first")
    }

    /// A writer waits for the readers, and readers see its whole change.
    @Test func readersSeeWholeWrites() throws {
        let lock = SharedLock((a: 0, b: 0))
        let stop = Atomic(false)
        let torn = Atomic(0)
        let readersDone = Atomic(0)
        for _ in 0..<4 {
            try spawnThread {
                while !stop.load(ordering: .acquiring) {
                    if lock.read({ $0.a != $0.b }) { torn.add(1, ordering: .relaxed) }
                }
                readersDone.add(1, ordering: .releasing)
            }
        }
        for i in 1...20_000 { lock.withLock { $0.a = i; $0.b = i } }
        stop.store(true, ordering: .releasing)
        while readersDone.load(ordering: .acquiring) < 4 { usleep(1000) }
        #expect(torn.load(ordering: .relaxed) == 0)
        #expect(lock.read { $0.a } == 20_000)
    }
}
