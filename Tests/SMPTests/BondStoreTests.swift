// The file bond store: written atomically with mode 0600, read back by a new store
// (a restart), replaced and removed per peer, a corrupt file is a typed error; and
// resolvable private addresses against the spec's ah example.

import Foundation
import HCI
import SMP
import Synchronization
import Testing

@Suite(.timeLimit(.minutes(3))) struct BondStoreTests {
    static func bond(_ text: String, irk: [UInt8]? = nil) -> Bond {
        let address = BluetoothAddress(text)!
        let ltk = LongTermKey(key: Array(0..<16), authenticated: true, secureConnections: true)
        return Bond(address: address, addressType: .public,
                    keys: PairingKeys(peerLTK: ltk, peerIdentity: irk.map { IdentityKey(irk: $0, address: address, addressType: .public) }))
    }

    @Test func aFileStoreSurvivesARestartAndKeepsItsFilePrivate() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("bonds-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/nested/bonds.json"
        let store = FileBondStore(path: path)
        #expect(try store.bonds().isEmpty)  // no file yet: empty
        try store.save(Self.bond("00:11:22:33:44:55"))
        try store.save(Self.bond("00:11:22:33:44:66"))
        var replaced = Self.bond("00:11:22:33:44:55")
        replaced.clientConfigurations = [0x0012: 0x0001]
        try store.save(replaced)
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect(attributes[.posixPermissions] as? Int == 0o600)
        #expect(!FileManager.default.fileExists(atPath: path + ".tmp"))

        let reopened = FileBondStore(path: path)
        let bonds = try reopened.bonds()
        #expect(bonds.count == 2)
        #expect(bonds.first { $0.address == BluetoothAddress("00:11:22:33:44:55")! }?.clientConfigurations == [0x0012: 0x0001])
        #expect(bonds.first?.keys.peerLTK?.key == Array(0..<16))
        #expect(try reopened.remove(address: BluetoothAddress("00:11:22:33:44:66")!, type: .public))
        #expect(try !reopened.remove(address: BluetoothAddress("00:11:22:33:44:66")!, type: .public))
        #expect(try FileBondStore(path: path).bonds().count == 1)
        // The description names the keys held, never their bytes.
        #expect(!bonds[0].description.contains("0, 1, 2"))

        try Data("{ not json".utf8).write(to: URL(fileURLWithPath: path))
        #expect(throws: BondStoreError.self) { try FileBondStore(path: path).bonds() }
    }

    /// A file written pretty-printed (as stores before compact lines wrote it) is read;
    /// the next change writes each bond on one line of its own, with our identity kept,
    /// and the bond changed in place of its old line.
    @Test func aPrettyPrintedFileIsReadAndRewrittenOneBondPerLine() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bonds-lines-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        struct Old: Encodable { var version = 1; var bonds: [Bond]; var localIdentity: IdentityKey? }
        let identity = IdentityKey(irk: Array(repeating: 5, count: 16), address: BluetoothAddress("00:11:22:33:44:00")!, addressType: .public)
        let old = [Self.bond("00:11:22:33:44:55"), Self.bond("00:11:22:33:44:66", irk: Array(16..<32))]
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(Old(bonds: old, localIdentity: identity)).write(to: URL(fileURLWithPath: path))

        let store = FileBondStore(path: path)
        #expect(try store.bonds() == old && store.localIdentity() == identity)
        var changed = old[0]
        changed.clientConfigurations = [0x0012: 0x0001]
        try store.save(changed)
        try store.save(Self.bond("00:11:22:33:44:77"))
        #expect(try store.remove(address: BluetoothAddress("00:11:22:33:44:77")!, type: .public))
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 4 && lines[0] == "{\"bonds\":[" && lines[3].hasPrefix("],\"localIdentity\":{") && lines[3].hasSuffix(",\"version\":1}"), "\(lines)")
        #expect(lines[1].contains("00:11:22:33:44:66") && lines[2].contains("00:11:22:33:44:55"), "\(lines)")
        let reopened = FileBondStore(path: path)
        #expect(try reopened.bonds() == [old[1], changed] && reopened.localIdentity() == identity)
        // No bonds: still a bond file.
        for b in old { _ = try reopened.remove(address: b.address, type: .public) }
        #expect(try FileBondStore(path: path).bonds().isEmpty && FileBondStore(path: path).localIdentity() == identity)
        #expect(try String(contentsOfFile: path, encoding: .utf8).hasPrefix("{\"bonds\":[],"))
    }

    /// Two stores on one file, as a daemon and `btctl bonds remove` beside it are: each
    /// reads the file again when the other has changed it, so neither's change brings
    /// back what the other removed or drops what the other added; a file deleted under
    /// a store is an empty store.
    @Test func twoStoresOnOneFileSeeEachOthersChanges() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bonds-shared-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let daemon = FileBondStore(path: path), tool = FileBondStore(path: path)
        let x = Self.bond("00:11:22:33:44:55"), y = Self.bond("00:11:22:33:44:66"), z = Self.bond("00:11:22:33:44:77")
        try daemon.save(x)
        #expect(try tool.bonds() == [x])
        #expect(try tool.remove(address: x.address, type: .public))
        #expect(try daemon.bonds().isEmpty)
        try daemon.save(y)
        try tool.save(z)
        try daemon.save(y)  // (unchanged: rewritten with z kept)
        #expect(try FileBondStore(path: path).bonds() == [z, y])
        #expect(try daemon.bonds() == [z, y] && tool.bonds() == [z, y])
        try FileManager.default.removeItem(atPath: path)
        #expect(try daemon.bonds().isEmpty)
        try daemon.save(x)
        #expect(try tool.bonds() == [x])
    }

    /// `changesByOthers` counts the changes another store (another process) made to
    /// the file, as this one finds them, never this store's own; a store in memory has
    /// nobody else (nil).
    @Test func changesByOthersCountsAnotherStoresChangesOnly() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bonds-others-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let daemon = FileBondStore(path: path), tool = FileBondStore(path: path)
        let x = Self.bond("00:11:22:33:44:55"), y = Self.bond("00:11:22:33:44:66")
        #expect(daemon.changesByOthers() == 0)
        try daemon.save(x)
        try daemon.save(y)
        _ = try daemon.remove(address: y.address, type: .public)
        #expect(daemon.changesByOthers() == 0)
        #expect(tool.changesByOthers() == 0)  // its first read is no change
        #expect(try tool.remove(address: x.address, type: .public))
        #expect(tool.changesByOthers() == 0)
        #expect(daemon.changesByOthers() == 1)
        #expect(daemon.changesByOthers() == 1)  // found once
        try tool.save(x)
        try daemon.save(y)  // finds the tool's change as it reads before writing
        #expect(daemon.changesByOthers() == 2)
        #expect(tool.changesByOthers() == 1)
        // Rewritten with the same content (a touch, a copy back): nothing changed.
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        try data.write(to: URL(fileURLWithPath: path + ".copy"))
        _ = rename(path + ".copy", path)
        #expect(daemon.changesByOthers() == 2 && tool.changesByOthers() == 1)
        #expect(InMemoryBondStore().changesByOthers() == nil)
    }

    /// Two stores saving at the same time, each its own bonds: the directory lock makes
    /// each change read what the other wrote, so every bond is in the file at the end
    /// (without it, each rewrite dropped what the other had just added).
    @Test func twoStoresSavingAtOnceLoseNothing() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bonds-racing-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let stores = [FileBondStore(path: path), FileBondStore(path: path)]
        let errors = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 2) { side in
            for i in 0..<60 {
                do { try stores[side].save(Self.bond(String(format: "00:11:22:33:%02X:%02X", side, i))) } catch {
                    errors.withLock { $0.append("\(error)") }
                }
            }
        }
        #expect(errors.withLock { $0 } == [])
        #expect(try FileBondStore(path: path).bonds().count == 120)
    }

    /// A process that keeps the directory locked (stopped while changing a bond file)
    /// delays a change for `lockWait` at most: it then fails with `.busy`, changing
    /// nothing, and the next change after the lock is let go goes through.
    @Test func aChangeWaitsForALockedDirectoryOnlySoLong() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("bonds-locked-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = FileBondStore(path: dir + "/bonds.json")
        try store.save(Self.bond("00:11:22:33:44:55"))
        let holder = open(dir, O_RDONLY | O_DIRECTORY)
        #expect(holder >= 0 && flock(holder, LOCK_EX) == 0)
        #expect(throws: BondStoreError.busy(path: dir)) { try store.save(Self.bond("00:11:22:33:44:66")) }
        #expect(try FileBondStore(path: dir + "/bonds.json").bonds().count == 1)
        close(holder)
        try store.save(Self.bond("00:11:22:33:44:66"))
        #expect(try FileBondStore(path: dir + "/bonds.json").bonds().count == 2)
    }

    /// A file that is not a bond file is a typed error whose text says, for a person,
    /// what is wrong and where (the field's path), names the file once, and says how to
    /// go on; never the decoder's debug dump.
    @Test(arguments: [
        ("{ not json", "not valid JSON"),
        ("[]", "expected an object"),
        (#"{"bonds": []}"#, "'version' is missing"),
        (#"{"version": "one", "bonds": []}"#, "expected a number at version"),
        (#"{"version": 1, "bonds": [{"address": "zz"}]}"#, "not a Bluetooth address: zz at bonds[0].address"),
        (#"{"version": 1, "bonds": [{}]}"#, "'address' is missing at bonds[0]"),
    ])
    func aCorruptFileSaysWhatAndWhere(content: String, reason: String) throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bonds-corrupt-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data(content.utf8).write(to: URL(fileURLWithPath: path))
        let error = try #require(throws: BondStoreError.self) { try FileBondStore(path: path).bonds() }
        #expect(error == .corrupt(path: path, reason: reason))
        #expect("\(error)" == "\(path) is not a bond file this version reads: \(reason); move it aside to start with no bonds")
    }

    @Test func aBondRecognisesItsPeersPrivateAddresses() throws {
        // ah's example (Vol 3, Part H, D.7): IRK ec0234a3..., prand 708194 → hash 0dfbaa,
        // so the RPA is 70:81:94:0D:FB:AA. IRKs are kept least significant octet first.
        let irk = Array(hex("ec0234a3 57c8ad05 341010a6 0a397d9b").reversed())
        let rpa = BluetoothAddress("70:81:94:0D:FB:AA")!
        #expect(ResolvablePrivateAddress.isResolvable(rpa))
        #expect(ResolvablePrivateAddress.resolves(rpa, irk: irk))
        #expect(!ResolvablePrivateAddress.resolves(BluetoothAddress("70:81:94:0D:FB:AB")!, irk: irk))
        let b = Self.bond("00:11:22:33:44:55", irk: irk)
        #expect(b.matches(rpa, type: .random))
        #expect(!b.matches(rpa, type: .public))
        #expect(InMemoryBondStore([b]).bond(for: rpa, type: .random) == b)
        // Generated addresses resolve under their IRK and are fresh each time.
        let random = SecurityRandom.seeded(9)
        let a1 = try #require(ResolvablePrivateAddress.generate(irk: irk, random: random))
        let a2 = try #require(ResolvablePrivateAddress.generate(irk: irk, random: random))
        #expect(a1 != a2 && ResolvablePrivateAddress.resolves(a1, irk: irk) && ResolvablePrivateAddress.resolves(a2, irk: irk))
    }
}
