// btctl gatt discover|read|write|subscribe|serve (docs/btctl.md).

import ArgumentParser
import BLE
import Foundation
import GATT
import HCI
import Snoop
import Synchronization

struct Gatt: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "GATT client and server.", subcommands: [Discover.self, Read.self, Write.self, Subscribe.self, Serve.self])

    struct Discover: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Connect and list every service, include, characteristic and descriptor.")
        @OptionGroup var options: ControllerOptions
        @OptionGroup var peer: PeerOptions
        @OptionGroup(title: "Pairing on demand") var pairing: PairingOptions
        @OptionGroup(title: "ATT and the link") var gatt: GATTClientOptions
        @Flag(help: "Also read every readable characteristic and every descriptor (long values included); a read the peer refuses shows its error and the listing goes on.")
        var values = false

        func run() async throws {
            let (session, writer) = try await PeerSession.open(options, peer, pairing, gatt: gatt)
            defer { writer?.close() }
            let primary: [RemoteService], includes: [RemoteInclude]
            var read: [UInt16: Result<[UInt8], BLEError>] = [:]
            do {
                primary = try await session.discoverAll()
                includes = try await session.includes()
                if values {
                    // Each attribute read once, in handle order, however many services include it.
                    var handles: Set<UInt16> = []
                    for s in primary + includes.map(\.service) {
                        for c in s.characteristics {
                            if c.properties.contains(.read) { handles.insert(c.valueHandle) }
                            for d in c.descriptors { handles.insert(d.handle) }
                        }
                    }
                    for h in handles.sorted() {
                        do {
                            read[h] = .success(try await session.reportingSecurity { try await session.peripheral.read(handle: h) })
                        } catch let e as BLEError {
                            guard case .att = e else { throw e }
                            read[h] = .failure(e)
                        }
                    }
                }
            } catch {
                await session.close()
                throw CLIError("discovery failed: \(error)")
            }
            await session.close()
            listServices(primary, includes: includes, read: read, json: options.json)
        }
    }

    struct Read: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Read a characteristic or descriptor (long values included).")
        @OptionGroup var options: ControllerOptions
        @OptionGroup var peer: PeerOptions
        @OptionGroup(title: "Pairing on demand") var pairing: PairingOptions
        @OptionGroup(title: "ATT and the link") var gatt: GATTClientOptions
        @OptionGroup var attribute: AttributeOptions
        @Flag(help: "Read every value of --uuid's type with Read Using Characteristic UUID (Read By Type Requests), without discovery, as gatttool's char-read-uuid; one line per value, none when the peer has none.")
        var byUUID = false

        func validate() throws {
            try attribute.requireOne(severalHandles: true)
            if byUUID, attribute.uuid == nil { throw ValidationError("--by-uuid reads by --uuid, not by --handle") }
        }

        func run() async throws {
            let (session, writer) = try await PeerSession.open(options, peer, pairing, gatt: gatt)
            defer { writer?.close() }
            do {
                let handles: [UInt16], values: [[UInt8]]
                if byUUID, let uuid = attribute.uuid {
                    let found = try await session.reportingSecurity { try await session.peripheral.read(uuid: uuid) }
                    (handles, values) = (found.map(\.handle), found.map(\.value))
                } else {
                    // Several handles: read together (Read Multiple Variable Length where the peer has it).
                    handles = attribute.handles.count > 1 ? attribute.handles : [try await session.valueHandle(attribute)]
                    values = try await session.reportingSecurity {
                        handles.count > 1 ? try await session.peripheral.read(handles: handles) : [try await session.peripheral.read(handle: handles[0])]
                    }
                }
                await session.close()
                for (handle, value) in zip(handles, values) {
                    if options.json { emit(.object([("event", .string("value"))] + valueJSON(handle, value, uuid: attribute.uuid))) } else { print(valueLine(handle, value, uuid: attribute.uuid)) }
                }
            } catch {
                await session.close()
                throw CLIError("read failed: \(error)")
            }
        }
    }

    struct Write: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Write a characteristic or descriptor (long values with prepared writes).")
        @OptionGroup var options: ControllerOptions
        @OptionGroup var peer: PeerOptions
        @OptionGroup(title: "Pairing on demand") var pairing: PairingOptions
        @OptionGroup(title: "ATT and the link") var gatt: GATTClientOptions
        @OptionGroup var attribute: AttributeOptions
        @Option(help: "The value as hex bytes (\"01ff\", \"01:ff\"); with --reliable, one per --handle, in order.") var value: [String] = []
        @Option(help: "The value as UTF-8 text.") var text: String?
        @Flag(help: "Write Without Response (Write Command).") var withoutResponse = false
        @Flag(help: "Signed Write Without Response, with the CSRK we gave the bonded peer (pair with --signing-keys).") var signed = false
        @Flag(help: "A Reliable Write: every --handle with its --value queued with Prepare Write Requests, each echo checked, then written together by one Execute Write Request (the peer writes all or none).")
        var reliable = false

        func validate() throws {
            if reliable {
                if withoutResponse || signed { throw ValidationError("--reliable writes with responses: neither --without-response nor --signed") }
                if attribute.uuid != nil || text != nil || attribute.handles.isEmpty || attribute.handles.count != value.count {
                    throw ValidationError("--reliable takes --handle H --value HEX pairs, as many of each")
                }
            } else {
                try attribute.requireOne()
                if value.count > 1 { throw ValidationError("give one --value (several only with --reliable)") }
                if value.isEmpty == (text == nil) { throw ValidationError("give either --value HEX or --text TEXT") }
            }
            if withoutResponse && signed { throw ValidationError("--without-response and --signed exclude each other") }
            if value.contains(where: { [UInt8](hex: $0) == nil }) { throw ValidationError("--value must be hex bytes") }
        }

        func run() async throws {
            let values = value.compactMap { [UInt8](hex: $0) }
            let bytes = text.map { Array($0.utf8) } ?? values.first ?? []
            let (session, writer) = try await PeerSession.open(options, peer, pairing, gatt: gatt)
            defer { writer?.close() }
            do {
                if reliable {
                    let writes = zip(attribute.handles, values).map { (handle: $0, value: $1) }
                    try await session.reportingSecurity { try await session.peripheral.writeReliably(handles: writes) }
                    await session.close()
                    for w in writes {
                        if options.json { emit(.object([("event", .string("written")), ("handle", .int(Int(w.handle))), ("length", .int(w.value.count))])) } else { print("wrote \(w.value.count) bytes to 0x\(hex4(w.handle)) (reliable write)") }
                    }
                    return
                }
                let handle = try await session.valueHandle(attribute)
                if signed {
                    try await session.peripheral.writeSigned(bytes, handle: handle)
                } else {
                    try await session.reportingSecurity { try await session.peripheral.write(bytes, handle: handle, withResponse: !withoutResponse) }
                }
                await session.close()
                if options.json { emit(.object([("event", .string("written")), ("handle", .int(Int(handle))), ("length", .int(bytes.count))])) } else { print("wrote \(bytes.count) bytes to 0x\(hex4(handle))") }
            } catch {
                await session.close()
                throw CLIError("write failed: \(error)")
            }
        }
    }

    struct Subscribe: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Subscribe to notifications (or indications) and print each value.")
        @OptionGroup var options: ControllerOptions
        @OptionGroup var peer: PeerOptions
        @OptionGroup(title: "Pairing on demand") var pairing: PairingOptions
        @OptionGroup(title: "ATT and the link") var gatt: GATTClientOptions
        @OptionGroup var attribute: AttributeOptions
        @Flag(help: "Every characteristic that notifies or indicates (notifications where both are offered, unless --indicate), instead of --handle or --uuid.")
        var all = false
        @Flag(help: "Indications instead of notifications.") var indicate = false
        @Option(help: "Stop after this many values in all (default: until interrupted or the link drops).") var count: Int?

        func validate() throws {
            if all {
                if !attribute.handles.isEmpty || attribute.uuid != nil { throw ValidationError("--all takes neither --handle nor --uuid") }
            } else {
                try attribute.requireOne()
            }
            if let count, count < 1 { throw ValidationError("--count must be at least 1, not \(count)") }
        }

        /// One value and the characteristic it came from (an index into the subscriptions).
        struct Tagged: Sendable {
            var index: Int
            var value: [UInt8]
        }

        func run() async throws {
            let (session, writer) = try await PeerSession.open(options, peer, pairing, gatt: gatt)
            defer { writer?.close() }
            do {
                // Each characteristic, and whether it is subscribed for indications.
                var targets: [(RemoteCharacteristic, indications: Bool)] = []
                if all {
                    for s in try await session.discoverAll() {
                        for c in s.characteristics where c.clientConfiguration != nil && !c.properties.isDisjoint(with: [.notify, .indicate]) {
                            targets.append((c, indicate ? c.properties.contains(.indicate) : !c.properties.contains(.notify)))
                        }
                    }
                    guard !targets.isEmpty else { throw CLIError("the peer has no characteristic that notifies or indicates") }
                } else {
                    guard let c = try await session.characteristic(attribute) else { throw CLIError("no such characteristic") }
                    guard c.clientConfiguration != nil else {
                        throw CLIError("characteristic \(c.uuid) has no Client Characteristic Configuration descriptor: it cannot notify or indicate")
                    }
                    targets = [(c, indicate)]
                }
                var subscriptions: [CharacteristicValues] = []
                for (c, indications) in targets {
                    subscriptions.append(try await session.reportingSecurity { try await session.peripheral.subscribe(to: c, indications: indications) })
                    let kind = indications ? "indication" : "notification"
                    if options.json {
                        emit(.object([("event", .string("subscribed")), ("handle", .int(Int(c.valueHandle))), ("uuid", .string(c.uuid.description)), ("indications", .bool(indications))]
                                     + nameField(c.uuid)))
                    } else {
                        note("subscribed to \(named(c.uuid)) (value 0x\(hex4(c.valueHandle))) for \(kind)s\(targets.count == 1 ? "; Ctrl-C stops" : "")")
                    }
                }
                if targets.count > 1, !options.json { note("\(targets.count) subscriptions; Ctrl-C stops") }
                fflush(nil)
                // The subscriptions' values in one sequence, in the order they came. Each
                // keeps its own newest 256; this one holds as many per subscription.
                let (merged, feed) = BufferedThrowingStream<Tagged>.makeStream(capacity: 256 * targets.count)
                let streams = subscriptions
                let forwarders = Task {
                    do {
                        try await withThrowingTaskGroup(of: Void.self) { g in
                            for (i, values) in streams.enumerated() {
                                g.addTask { for try await v in values { _ = feed.yield(Tagged(index: i, value: v)) } }
                            }
                            try await g.waitForAll()
                        }
                        feed.finish()
                    } catch {
                        feed.finish(throwing: error)
                    }
                }
                var n = 0
                let started = ContinuousClock.now
                let output = SubscriptionOutput(json: options.json)
                let single = targets.count == 1 ? (targets[0].indications ? "indication" : "notification") : "value"
                // A pairing the peer starts while the values come (its Security Request),
                // and bond changes, are shown as they end, between value lines.
                let shower = session.feed.map { feed in Task { for await _ in feed.rings { output.security(feed) } } }
                defer { session.feed?.close() }
                do {
                    for try await t in merged {
                        n += 1
                        let (c, indications) = targets[t.index]
                        output.value(status: "\(n) \(single)s") {
                            if options.json {
                                emit(.object([("event", .string(indications ? "indication" : "notification"))] + valueJSON(c.valueHandle, t.value, uuid: c.uuid)))
                            } else {
                                print(valueLine(c.valueHandle, t.value, uuid: c.uuid))
                            }
                        }
                        if let count, n >= count { break }
                    }
                } catch BLEError.disconnected, BLEError.transportClosed {
                    // The link ended (the peer, or a signal's shutdown): the values end here.
                }
                // Letting go of each subscription writes it off the peer's CCCD (queued
                // before the disconnection).
                forwarders.cancel()
                await forwarders.value
                session.feed?.close()
                await shower?.value
                output.clear()
                session.feed?.show()
                let seconds = tenthsOfSecondsSince(started)
                await session.close()
                // Values lost while the output fell behind: each subscription keeps its
                // newest 256, the merged sequence as many per subscription.
                let dropped = streams.reduce(merged.dropped.count) { $0 + $1.dropped.count }
                // The closing summary: how many values came in how long (after an interrupt too).
                if options.json {
                    emit(.object([("event", .string("summary")), ("values", .int(n)), ("seconds", .double(seconds))] + (dropped > 0 ? [("dropped", .int(dropped))] : [])))
                } else {
                    note("\(n) \(single)\(n == 1 ? "" : "s") in \(seconds) s" + (dropped > 0 ? "; \(dropped) dropped while the output fell behind" : ""))
                }
                if let count, n < count { throw CLIError("the link ended after \(n) of \(count) values") }
            } catch let e as CLIError {
                await session.close()
                throw e
            } catch {
                await session.close()
                throw CLIError("subscribe failed: \(error)")
            }
        }
    }
}

/// What `gatt subscribe` writes while values come: each value's line with the status
/// line under it, and the security events that come meanwhile (`SecurityFeed`), from
/// the task taking the values and the one following the feed, one at a time, so no line
/// is written into another or over the status line.
private final class SubscriptionOutput: Sendable {
    private let state: Mutex<(live: LiveStatus, status: String)>
    init(json: Bool) { state = Mutex((LiveStatus(json: json), "")) }

    /// Writes a value (`write` prints its line), then `status` on the status line.
    func value(status: String, _ write: () -> Void) {
        state.withLock { s in
            s.live.willPrint()
            write()
            fflush(nil)
            s.status = status
            s.live.update(status)
        }
    }

    /// Shows what `feed` has queued (notes on standard error, or JSON lines), then the
    /// status line again.
    func security(_ feed: SecurityFeed) {
        guard feed.hasQueued else { return }
        state.withLock { s in
            s.live.willNote()
            feed.show()
            if !s.status.isEmpty { s.live.update(s.status) }
        }
    }

    /// Erases the status line (before the summary).
    func clear() { state.withLock { $0.live.clear() } }
}

/// The primary services as `gatt discover` (and `shell`'s `discover`) lists them, in
/// handle order (secondary services, reached through `includes`, in their place), each with its
/// include declarations, characteristics and descriptors, and what reading each gave
/// (`read`, by handle) under it.
func listServices(_ primary: [RemoteService], includes: [RemoteInclude], read: [UInt16: Result<[UInt8], BLEError>] = [:], json: Bool) {
    var all = primary
    for inc in includes where !all.contains(inc.service) { all.append(inc.service) }
    all.sort { $0.startHandle < $1.startHandle }
    for s in all {
        list(s, includes: includes.filter { (s.startHandle...s.endHandle).contains($0.handle) }, read: read, json: json)
    }
}

/// JSON fields for what reading `handle` gave: the value (hex, text, formatted) or the error.
private func readFields(_ outcome: Result<[UInt8], BLEError>?, uuid: BluetoothUUID) -> [(String, JSONValue)] {
    switch outcome {
    case nil: return []
    case let .success(v): return valueFields(v, uuid: uuid)
    case let .failure(e): return [("error", .string("\(e)"))]
    }
}

/// The line under an attribute for what reading it gave.
private func readLine(_ outcome: Result<[UInt8], BLEError>?, _ handle: UInt16, uuid: BluetoothUUID, indent: String) {
    switch outcome {
    case nil: break
    case let .success(v): print(indent + valueLine(handle, v, uuid: uuid))
    case let .failure(e): print(indent + "0x\(hex4(handle)): \(e)")
    }
}

private func list(_ s: RemoteService, includes: [RemoteInclude], read: [UInt16: Result<[UInt8], BLEError>], json: Bool) {
    if json {
        emit(.object([("event", .string("service")), ("uuid", .string(s.uuid.description)), ("primary", .bool(s.isPrimary)),
                      ("start", .int(Int(s.startHandle))), ("end", .int(Int(s.endHandle)))] + nameField(s.uuid)))
    } else {
        print("\(s.isPrimary ? "" : "secondary ")service \(named(s.uuid))  handles \(hexRange(s.startHandle, s.endHandle))")
    }
    for i in includes {
        if json {
            emit(.object([("event", .string("include")), ("service", .string(s.uuid.description)), ("handle", .int(Int(i.handle))),
                          ("uuid", .string(i.service.uuid.description)), ("start", .int(Int(i.service.startHandle))),
                          ("end", .int(Int(i.service.endHandle)))] + nameField(i.service.uuid)))
        } else {
            print("  include \(named(i.service.uuid))  handles \(hexRange(i.service.startHandle, i.service.endHandle))  at 0x\(hex4(i.handle))")
        }
    }
    for c in s.characteristics {
        if json {
            emit(.object([("event", .string("characteristic")), ("service", .string(s.uuid.description)), ("uuid", .string(c.uuid.description)),
                          ("handle", .int(Int(c.valueHandle))), ("properties", .array(propertyNames(c.properties).map { .string($0) }))]
                     + nameField(c.uuid) + readFields(read[c.valueHandle], uuid: c.uuid)))
        } else {
            print("  characteristic \(named(c.uuid))  value 0x\(hex4(c.valueHandle))  \(propertyNames(c.properties).joined(separator: ","))")
            readLine(read[c.valueHandle], c.valueHandle, uuid: c.uuid, indent: "      ")
        }
        for d in c.descriptors {
            if json {
                emit(.object([("event", .string("descriptor")), ("characteristic", .string(c.uuid.description)), ("uuid", .string(d.uuid.description)),
                              ("handle", .int(Int(d.handle)))] + nameField(d.uuid) + readFields(read[d.handle], uuid: d.uuid)))
            } else {
                print("    descriptor \(named(d.uuid))  0x\(hex4(d.handle))")
                readLine(read[d.handle], d.handle, uuid: d.uuid, indent: "        ")
            }
        }
    }
}

private func hexRange(_ a: UInt16, _ b: UInt16) -> String { "0x\(hex4(a))–0x\(hex4(b))" }
