// Where bonds live (Vol 3, Part H, §2.4.1 and Part C, §9.4): a protocol, an
// in-memory store, and the default file store, one JSON file per adapter written
// atomically with mode 0600. Keys are never logged; `Bond.description` leaves them out.
// The bond itself is in Bond.swift.

import Foundation
import HCI
import Synchronization

/// A place to keep bonds. Implementations are thread-safe; errors are I/O errors.
public protocol BondStore: Sendable {
    func bonds() throws -> [Bond]
    /// Adds or replaces the bond for `bond.address`/`addressType`.
    func save(_ bond: Bond) throws
    /// Returns whether a bond was removed.
    @discardableResult func remove(address: BluetoothAddress, type: AddressType) throws -> Bool
    /// This adapter's own identity (our IRK and identity address), kept with its
    /// bonds: peers bonded with us resolve our private addresses with this IRK, so it
    /// must outlive the process as long as they do. Nil until privacy first needs one.
    func localIdentity() throws -> IdentityKey?
    func saveLocalIdentity(_ identity: IdentityKey) throws
    /// How many times, looking now, this store found its bonds changed by someone
    /// else (another process rewriting a shared file: `btctl bonds remove` beside a
    /// daemon); nil for a store nobody else changes. A Security Manager asks every
    /// `SecurityManager.storeCheckInterval` and, when the count moved, brings what it
    /// derived from the bonds in line (`SecurityEvent.bondsChangedElsewhere`).
    func changesByOthers() -> UInt64?
}

extension BondStore {
    /// Nobody else changes this store.
    public func changesByOthers() -> UInt64? { nil }

    /// The bond whose peer is `address` (identity, link address or resolved RPA).
    public func bond(for address: BluetoothAddress, type: AddressType) -> Bond? {
        (try? bonds())?.first { $0.matches(address, type: type) }
    }
}

/// Bonds for the life of the process.
public final class InMemoryBondStore: BondStore {
    private let state = Mutex<[Bond]>([])
    private let identity = Mutex<IdentityKey?>(nil)
    public init(_ bonds: [Bond] = []) { state.withLock { $0 = bonds } }
    public func localIdentity() -> IdentityKey? { identity.withLock { $0 } }
    public func saveLocalIdentity(_ identity: IdentityKey) { self.identity.withLock { $0 = identity } }
    public func bonds() -> [Bond] { state.withLock { $0 } }
    public func save(_ bond: Bond) {
        state.withLock { list in
            list.removeAll { $0.isEntry(of: bond) }
            list.append(bond)
        }
    }
    public func remove(address: BluetoothAddress, type: AddressType) -> Bool {
        state.withLock { list in
            let before = list.count
            list.removeAll { $0.address == address && $0.addressType.rawValue & 1 == type.rawValue & 1 }
            return list.count != before
        }
    }
}

public enum BondStoreError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The file could not be read or written (the system's error number).
    case io(path: String, errno: Int32)
    /// The file is not a bond file this version reads: `reason` says what and where.
    case corrupt(path: String, reason: String)
    /// Another process kept the bond files' directory locked (`FileBondStore.lockWait`):
    /// the change was not made.
    case busy(path: String)

    public var description: String {
        switch self {
        case let .io(path, e):
            return "\(path): \(String(cString: strerror(e))) (errno \(e))"
        case let .corrupt(path, reason):
            return "\(path) is not a bond file this version reads: \(reason); move it aside to start with no bonds"
        case let .busy(path):
            return "\(path): another process kept it locked while changing a bond file; nothing was changed"
        }
    }

    /// What a decoding error says, for a person: the field it is about (as a path
    /// such as `bonds[0].address`) and what was wrong there.
    static func reason(_ error: any Error) -> String {
        guard let e = error as? DecodingError else { return "\(error)" }
        func at(_ path: [any CodingKey]) -> String {
            let p = path.reduce("") { s, k in k.intValue.map { s + "[\($0)]" } ?? (s.isEmpty ? k.stringValue : s + "." + k.stringValue) }
            return p.isEmpty ? "" : " at \(p)"
        }
        switch e {
        case let .dataCorrupted(c) where c.codingPath.isEmpty:
            return "not valid JSON" + ((c.underlyingError as NSError?).flatMap { $0.userInfo[NSDebugDescriptionErrorKey] as? String }.map { " (\($0))" } ?? "")
        case let .dataCorrupted(c):
            return c.debugDescription + at(c.codingPath)
        case let .keyNotFound(k, c):
            return "'\(k.stringValue)' is missing" + at(c.codingPath)
        case let .typeMismatch(t, c):
            return "expected \(Self.name(of: t))" + at(c.codingPath)
        case let .valueNotFound(t, c):
            return "expected \(Self.name(of: t)), found null" + at(c.codingPath)
        @unknown default:
            return "\(e)"
        }
    }

    private static func name(of type: Any.Type) -> String {
        switch type {
        case is String.Type: return "a string"
        case is Bool.Type: return "true or false"
        case is Int.Type, is Int32.Type, is UInt8.Type, is UInt16.Type, is UInt32.Type, is UInt64.Type: return "a number"
        default:
            let n = "\(type)"
            if n.hasPrefix("Array") { return "an array" }
            if n.hasPrefix("Dictionary") { return "an object" }
            return n
        }
    }
}

/// Bonds in one JSON file per adapter (by default
/// `$XDG_STATE_HOME/swift-ble/bonds-<adapter address>.json`, else
/// `~/.local/state/swift-ble/...`), rewritten whole and atomically (a temporary file
/// with mode 0600, fsync, rename) on every change. A missing file is an empty store.
/// Each bond is one line of compact JSON, encoded when it is saved and kept: a change
/// encodes the bond it changes, not every bond (with 1,000 bonds, each holding a GATT
/// layout, encoding them all took over 100 ms on the caller's thread, the event loop).
/// Several processes may share the file (a daemon, and `btctl bonds remove` beside it):
/// the content is read again whenever the file is no longer the one last read or
/// written, and a change holds an exclusive flock(2) on the file's directory from its
/// read to its rename, so no process's change undoes another's (waiting at most
/// `lockWait` for the lock).
public final class FileBondStore: BondStore {
    public let path: String
    private let lock = Mutex<Cached?>(nil)

    public init(path: String) { self.path = path }

    /// The longest a change waits for another process's change to the bond files in the
    /// same directory (each takes a few milliseconds, one fsync) before it fails with
    /// `BondStoreError.busy`.
    public static let lockWait: Duration = .seconds(2)

    /// The default file for the adapter whose public address is `adapter`.
    public static func defaultPath(adapter: BluetoothAddress, environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        let base = environment["XDG_STATE_HOME"] ?? ((environment["HOME"] ?? "/tmp") + "/.local/state")
        return base + "/swift-ble/bonds-" + adapter.description.replacingOccurrences(of: ":", with: "") + ".json"
    }

    public func bonds() throws -> [Bond] { try read().file.bonds }

    public func localIdentity() throws -> IdentityKey? { try read().file.localIdentity }

    public func save(_ bond: Bond) throws {
        try change { content in
            _ = content.remove { $0.isEntry(of: bond) }
            content.file.bonds.append(bond)
            content.encoded.append(nil)
            return true
        }
    }

    public func saveLocalIdentity(_ identity: IdentityKey) throws {
        try change { content in
            content.file.localIdentity = identity
            return true
        }
    }

    public func remove(address: BluetoothAddress, type: AddressType) throws -> Bool {
        try change { content in
            content.remove { $0.address == address && $0.addressType.rawValue & 1 == type.rawValue & 1 }
        }
    }

    /// The file's content: the cached one while the file is the one it was read from or
    /// written as, else read again (another process, `btctl bonds remove` beside a
    /// daemon, changed or deleted it).
    private func read() throws -> Content {
        try lock.withLock { cached in
            let now = try current(cached)
            cached = now
            return now.content
        }
    }

    /// `cached` while the file is still the one it came from, else the file read again
    /// (and, when its bonds or identity differ from the cached ones, one more change by
    /// someone else counted).
    private func current(_ cached: Cached?) throws -> Cached {
        let now = Stamp(path)
        if let cached, cached.stamp == now { return cached }
        var fresh = Cached(content: try Content(file: load()), stamp: now)
        if let cached {
            let same = cached.content.file.bonds == fresh.content.file.bonds && cached.content.file.localIdentity == fresh.content.file.localIdentity
            fresh.changesByOthers = cached.changesByOthers &+ (same ? 0 : 1)
        }
        return fresh
    }

    /// Reads the file again if another process rewrote it since (one stat(2) when not).
    /// A file that cannot be read now counts nothing; the next look tries again.
    public func changesByOthers() -> UInt64? {
        lock.withLock { cached in
            if let now = try? current(cached) { cached = now }
            return cached?.changesByOthers ?? 0
        }
    }

    /// Applies `edit` to the content and rewrites the file when it says something
    /// changed. Holds an exclusive lock on the file's directory (flock(2)) from reading
    /// to the rename, so two processes' changes do not undo each other.
    @discardableResult
    private func change(_ edit: (inout Content) -> Bool) throws -> Bool {
        try lock.withLock { cached in
            let directory = (path as NSString).deletingLastPathComponent
            if !directory.isEmpty {
                try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            }
            let lockPath = directory.isEmpty ? "." : directory
            let locked = open(lockPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard locked >= 0 else { throw BondStoreError.io(path: lockPath, errno: errno) }
            defer { close(locked) }
            // Waited for on the caller's thread (the event loop), so for a bounded time: a
            // process stopped while it holds the lock must not stop this one's stack.
            var waited = Duration.zero
            while flock(locked, LOCK_EX | LOCK_NB) != 0 {
                guard errno == EINTR || errno == EWOULDBLOCK else { throw BondStoreError.io(path: lockPath, errno: errno) }
                guard waited < Self.lockWait else { throw BondStoreError.busy(path: lockPath) }
                usleep(1000)
                waited += .milliseconds(1)
            }
            var now = try current(cached)
            guard edit(&now.content) else {
                cached = now
                return false
            }
            try write(&now.content)
            now.stamp = Stamp(path)
            cached = now
            return true
        }
    }

    /// What was read or written, and which file it was (nil: none).
    private struct Cached {
        var content: Content
        var stamp: Stamp?
        /// Re-reads that found other bonds than the ones held (`changesByOthers`).
        var changesByOthers: UInt64 = 0
    }

    /// Which file `path` names now: a rewrite renames a new file into place, so its inode
    /// changes with every change.
    private struct Stamp: Equatable {
        var device: UInt64, inode: UInt64, size: Int64, seconds: Int, nanoseconds: Int
        init?(_ path: String) {
            var st = stat()
            guard stat(path, &st) == 0 else { return nil }
            (device, inode, size) = (UInt64(st.st_dev), UInt64(st.st_ino), Int64(st.st_size))
            (seconds, nanoseconds) = (st.st_mtim.tv_sec, st.st_mtim.tv_nsec)
        }
    }

    private struct File: Codable {
        var version = 1
        var bonds: [Bond] = []
        /// Our own IRK and identity address (absent in files from before privacy).
        var localIdentity: IdentityKey?
    }

    /// The file as decoded, with each bond's JSON as last written (nil: not encoded yet).
    private struct Content {
        var file: File
        var encoded: [Data?]
        init(file: File) {
            self.file = file
            self.encoded = Array(repeating: nil, count: file.bonds.count)
        }

        /// Removes the bonds `matching` picks, with their JSON; returns whether any were.
        mutating func remove(where matching: (Bond) -> Bool) -> Bool {
            let kept = file.bonds.indices.filter { !matching(file.bonds[$0]) }
            guard kept.count != file.bonds.count else { return false }
            file.bonds = kept.map { file.bonds[$0] }
            encoded = kept.map { encoded[$0] }
            return true
        }
    }

    private func load() throws -> File {
        guard FileManager.default.fileExists(atPath: path) else { return File() }
        guard let data = FileManager.default.contents(atPath: path) else { throw BondStoreError.io(path: path, errno: errno) }
        do {
            return try JSONDecoder().decode(File.self, from: data)
        } catch {
            throw BondStoreError.corrupt(path: path, reason: BondStoreError.reason(error))
        }
    }

    /// The file's bytes: the members in key order as `JSONEncoder` sorts them, each
    /// bond on a line of its own (encoded now if it has not been).
    private static func bytes(_ content: inout Content) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var data = Data("{\"bonds\":[".utf8)
        for i in content.file.bonds.indices {
            let bond: Data
            if let e = content.encoded[i] { bond = e } else {
                bond = try encoder.encode(content.file.bonds[i])
                content.encoded[i] = bond
            }
            data.append(contentsOf: i == 0 ? [0x0A] : [0x2C, 0x0A])
            data.append(bond)
        }
        data.append(contentsOf: content.file.bonds.isEmpty ? Array("]".utf8) : Array("\n]".utf8))
        if let identity = content.file.localIdentity {
            data.append(contentsOf: Array(",\"localIdentity\":".utf8))
            data.append(try encoder.encode(identity))
        }
        data.append(contentsOf: Array(",\"version\":\(content.file.version)}\n".utf8))
        return data
    }

    /// Writes `content` in place of the file (its directory made by `change`).
    private func write(_ content: inout Content) throws {
        let data = try Self.bytes(&content)
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw BondStoreError.io(path: temporary, errno: errno) }
        var failed: Int32 = 0
        data.withUnsafeBytes { raw in
            guard let base = raw.baseAddress else { return }
            var offset = 0
            while offset < raw.count {
                let n = Glibc.write(fd, base + offset, raw.count - offset)
                if n < 0 { if errno == EINTR { continue }; failed = errno; return }
                offset += n
            }
        }
        if failed == 0, fsync(fd) != 0 { failed = errno }
        close(fd)
        guard failed == 0 else {
            unlink(temporary)
            throw BondStoreError.io(path: temporary, errno: failed)
        }
        guard rename(temporary, path) == 0 else { throw BondStoreError.io(path: path, errno: errno) }
    }
}
