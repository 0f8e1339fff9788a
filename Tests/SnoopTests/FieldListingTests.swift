// The generated parameter listings (Sources/HCI/FieldListing+<codec file>.swift) against a
// reflection oracle: for every command, return parameters and event type the stack
// decodes, values decoded from seeded random bytes must list the same fields, in the
// same order, with the same JSON values as `Mirror` finds in them. A codec that gains a
// field without `python3 Scripts/field-listing.py` being re-run fails here.

import HCI
import Testing
@testable import Snoop

@Suite(.timeLimit(.minutes(3)))
struct FieldListingTests {
    /// SplitMix64: the same bytes every run.
    struct Seeded {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func bytes(_ n: Int) -> [UInt8] { (0..<n).map { _ in UInt8(truncatingIfNeeded: next()) } }
    }

    /// Builds the JSON a listing produces.
    struct Tree: FieldVisitor {
        var stack: [[(String?, JSONValue)]] = [[]]
        var keys: [String?] = [nil]
        var pendingKey: String?
        mutating func put(_ v: JSONValue) {
            stack[stack.count - 1].append((pendingKey, v))
            pendingKey = nil
        }
        mutating func key(_ name: StaticString) { pendingKey = name.description }
        mutating func int(_ value: Int) { put(.int(value)) }
        mutating func uint64(_ value: UInt64) { put(value <= UInt64(Int.max) ? .int(Int(value)) : .string(String(value))) }
        mutating func bool(_ value: Bool) { put(.bool(value)) }
        mutating func null() { put(.null) }
        mutating func text(_ value: String) { put(.string(value)) }
        mutating func hex(_ bytes: [UInt8]) { put(.string(bytes.hexString)) }
        mutating func beginObject() { keys.append(pendingKey); pendingKey = nil; stack.append([]) }
        mutating func endObject() {
            let members = stack.removeLast()
            pendingKey = keys.removeLast()
            put(.object(members.map { ($0.0 ?? "?", $0.1) }))
        }
        mutating func beginArray() { beginObject() }
        mutating func endArray() {
            let members = stack.removeLast()
            pendingKey = keys.removeLast()
            put(.array(members.map(\.1)))
        }
        var fields: [(String, JSONValue)] { stack[0].map { ($0.0 ?? "?", $0.1) } }
    }

    // The reflection-based listing the decoder used before the generated one: the oracle.
    static func mirrored(_ value: Any) -> JSONValue {
        .object(Mirror(reflecting: value).children.compactMap { c in c.label.map { ($0, json(c.value)) } })
    }

    static func json(_ v: Any) -> JSONValue {
        // (The old decoder cast with `as [UInt8]`, which an empty array of any element
        // type passes: it printed an empty NOCP entry list as "". The listing prints [].)
        if type(of: v) == [UInt8].self, let b = v as? [UInt8] { return .string(b.hexString) }
        switch v {
        case let i as UInt8: return .int(Int(i))
        case let i as Int8: return .int(Int(i))
        case let i as UInt16: return .int(Int(i))
        case let i as UInt32: return .int(Int(i))
        case let i as UInt64: return i <= UInt64(Int.max) ? .int(Int(i)) : .string(String(i))
        case let i as Int: return .int(i)
        case let b as Bool: return .bool(b)
        case let s as HCIStatus: return .string(s.description)
        case let a as BluetoothAddress: return .string(a.description)
        case let c as any CustomStringConvertible where !(v is any Collection) && Mirror(reflecting: v).displayStyle != .struct:
            return .string(c.description)
        default:
            let m = Mirror(reflecting: v)
            if m.displayStyle == .optional {
                guard let inner = m.children.first?.value else { return .null }
                return json(inner)
            }
            if m.displayStyle == .collection { return .array(m.children.map { json($0.value) }) }
            if let rv = (v as? any RawRepresentable)?.rawValue as? UInt8 {
                let d = (v as? any CustomStringConvertible)?.description
                return d.map { .string($0) } ?? .int(Int(rv))
            }
            if m.children.isEmpty { return .string("\(v)") }
            return mirrored(v)
        }
    }

    @Test func everyCommandAndReturnListsWhatReflectionSees() throws {
        var rng = Seeded(state: 0x5EED)
        var commands = 0, returns = 0
        for (opcode, _) in HCICommandRegistry.types.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            var decodedCommand = false, decodedReturn = false
            for length in 0...80 {
                for _ in 0..<4 {
                    let bytes = rng.bytes(length)
                    if let c = try? HCICommandRegistry.decode(opcode: opcode, parameters: bytes) {
                        #expect(Self.listedExistential(c) == Self.mirrored(c), "\(opcode) parameters")
                        decodedCommand = true
                    }
                    if let r = try? HCICommandRegistry.decodeReturn(opcode: opcode, returnParameters: bytes) {
                        #expect(Self.listedExistential(r) == Self.mirrored(r), "\(opcode) return parameters")
                        decodedReturn = true
                    }
                }
            }
            if decodedCommand { commands += 1 }
            if decodedReturn { returns += 1 }
        }
        // Random bytes decode for nearly every type; the few with stricter layouts are
        // covered by the fixtures' byte-identical output.
        #expect(commands >= HCICommandRegistry.types.count - 6)
        #expect(returns >= HCICommandRegistry.types.count - 2)
    }

    @Test func everyEventListsWhatReflectionSees() {
        var rng = Seeded(state: 0xE7E7)
        var kinds = Set<String>()
        let codes: [UInt8] = [0x05, 0x08, 0x0C, 0x10, 0x13, 0x1A, 0x30]
        let subevents: [UInt8] = [0x01, 0x02, 0x03, 0x04, 0x05, 0x07, 0x0A, 0x0B, 0x0C, 0x0D, 0x12, 0x14, 0x29]
        for length in 0...60 {
            for _ in 0..<24 {
                var candidates: [(UInt8, [UInt8])] = codes.map { ($0, rng.bytes(length)) }
                candidates += subevents.map { (0x3E, [$0] + rng.bytes(length)) }
                for (code, params) in candidates {
                    guard let e = try? HCIEvent(code: HCIEventCode(rawValue: code), parameters: params), let p = Self.payload(e) else { continue }
                    #expect(Self.listedExistential(p) == Self.mirrored(p), "\(e)")
                    kinds.insert("\(type(of: p))")
                }
            }
        }
        #expect(kinds.count >= 14, "event types exercised: \(kinds.sorted())")
    }

    static func payload(_ e: HCIEvent) -> (any FieldListing)? {
        switch e {
        case let .disconnectionComplete(x): return x
        case let .numberOfCompletedPackets(x): return x
        case let .encryptionChange(x): return x
        case let .encryptionKeyRefreshComplete(x): return x
        case let .readRemoteVersionInformationComplete(x): return x
        case let .hardwareError(x): return x
        case let .dataBufferOverflow(x): return x
        case let .le(le):
            switch le {
            case let .connectionComplete(x): return x
            case let .advertisingReport(x): return x
            case let .connectionUpdateComplete(x): return x
            case let .readRemoteFeaturesComplete(x): return x
            case let .longTermKeyRequest(x): return x
            case let .dataLengthChange(x): return x
            case let .enhancedConnectionComplete(x): return x
            case let .directedAdvertisingReport(x): return x
            case let .phyUpdateComplete(x): return x
            case let .extendedAdvertisingReport(x): return x
            case let .advertisingSetTerminated(x): return x
            case let .channelSelectionAlgorithm(x): return x
            default: return nil
            }
        default: return nil
        }
    }

    static func listedExistential(_ v: any FieldListing) -> JSONValue {
        func open<T: FieldListing>(_ x: T) -> JSONValue {
            var t = Tree()
            x.listFields(into: &t)
            return .object(t.fields)
        }
        return open(v)
    }
}
