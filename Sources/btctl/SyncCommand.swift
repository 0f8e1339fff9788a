// btctl sync: follow a device's periodic advertising (docs/btctl.md).

import ArgumentParser
import BLE
import Foundation
import GAP
import HCI
import Snoop

struct Sync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Follow a device's periodic advertising and print each packet, decoded.",
        discussion: "Scans until ADDRESS (or a device named --name) announces periodic advertising in an extended advertisement, synchronises to it and prints every packet until --duration passes, the controller loses the train, or Ctrl-C. Given several advertisers, follows whichever train is found first. When each names its set (ADDRESS/SID or ADDRESS/random/SID, or --sid for all), the controller looks for them itself through its Periodic Advertiser List. Needs a controller with periodic advertising (btctl info: LE Periodic Advertising). A passive scan runs while the sync does: some controllers (Rootcanal) deliver the packets only while they scan.")
    @OptionGroup var options: ControllerOptions
    @Argument(help: "The advertisers: XX:XX:XX:XX:XX:XX[/random|/public][/SID] (default public; or give --name).") var addresses: [String] = []
    @Option(help: "Find the advertiser by its advertised name instead of its address.") var name: String?
    @Option(help: "Only the advertising set with this SID (0 to 15): a device may run several trains.") var sid: Int?
    @Option(parsing: .unconditional, help: "Seconds to look for the advertiser and its train (0.1 to 600).") var within: Double = 10
    @Option(parsing: .unconditional, help: "Seconds to follow the train (0.1 to 86400).") var duration: Double = 30
    @Option(parsing: .unconditional, help: "Milliseconds without a packet before the controller gives the train up (100 to 163840).") var syncTimeout: Int = 2000
    @Option(help: ArgumentHelp("Look for the advertiser on this PHY (repeatable; 1m or coded, default 1m): coded finds a set advertising long range.",
                               valueName: "PHY")) var phy: [PHYName] = []

    /// The PHYs `--phy` names, LE 1M when it names none.
    var phys: Set<PHY> { phy.isEmpty ? [.le1M] : Set(phy.map(\.phy)) }

    /// An advertiser argument, `XX:XX:XX:XX:XX:XX[/random|/public][/SID]`: its address
    /// type as `btctl scan` prints it (public unless said), then its set's SID if given.
    static func advertiser(_ text: String) throws -> (address: BluetoothAddress, type: AddressType, sid: UInt8?) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false).map { $0.lowercased() }
        let bad = ValidationError("bad advertiser '\(text)' (XX:XX:XX:XX:XX:XX[/random|/public][/SID], a SID being 0 to 15)")
        guard parts.count <= 3, let a = BluetoothAddress(parts[0]) else { throw bad }
        var type: AddressType?
        var sid: UInt8?
        for p in parts.dropFirst() {
            if type == nil, sid == nil, p == "public" || p == "random" {
                type = p == "random" ? .random : .public
            } else if sid == nil, let n = UInt8(p), n <= 15 {
                sid = n
            } else {
                throw bad
            }
        }
        return (a, type ?? .public, sid)
    }

    func validate() throws {
        guard addresses.isEmpty != (name == nil) else { throw ValidationError("give the advertisers' ADDRESSes or --name, one of them") }
        for a in addresses { _ = try Self.advertiser(a) }
        if let s = sid, !(0...15).contains(s) { throw ValidationError("--sid must be between 0 and 15, not \(s)") }
        try validatePrimaryPHYs(phys, "--phy")
        if sid != nil, try addresses.contains(where: { try Self.advertiser($0).sid != nil }) {
            throw ValidationError("give the SID with --sid or in ADDRESS/SID, not both")
        }
        guard within.isFinite, (0.1...600).contains(within) else { throw ValidationError("--within must be between 0.1 and 600 seconds, not \(within)") }
        guard duration.isFinite, (0.1...86_400).contains(duration) else { throw ValidationError("--duration must be between 0.1 and 86400 seconds, not \(duration)") }
        guard (100...163_840).contains(syncTimeout) else { throw ValidationError("--sync-timeout must be between 100 and 163840 ms, not \(syncTimeout)") }
    }

    func run() async throws {
        let (host, writer) = try await options.openHost()
        defer { writer?.close() }
        let json = options.json
        do {
            let info = try await host.start()
            guard await host.usesExtendedCommands, info.leFeatures.contains(bit: LEFeatures.periodicAdvertising) else {
                await host.shutdown()
                throw CLIError("this controller has no periodic advertising (LE Periodic Advertising with the extended commands; btctl info shows its features)")
            }
            let advertisers = try addresses.map(Self.advertiser)
            let filter = ScanFilter(names: name.map { [$0] } ?? [], addresses: advertisers.map(\.address))
            // Held for the sync's life, not read (see the discussion above).
            let scan = try await host.central.scan(filter: filter, active: false, filterDuplicates: false, phys: phys, capacity: 1)
            let sync: PeriodicAdvertisingSync
            let known = advertisers.compactMap { a in (a.sid ?? sid.map(UInt8.init)).map { PeriodicAdvertiser(address: a.address, type: a.type, sid: $0) } }
            if !advertisers.isEmpty, known.count == advertisers.count {
                // Every set named: the controller looks for them itself (through its
                // Periodic Advertiser List when there are several).
                do {
                    sync = try await host.central.synchronize(toAnyOf: known, within: cliDuration(seconds: within), timeout: .milliseconds(syncTimeout),
                                                              phys: phys)
                } catch BLEError.periodicSyncTimeout {
                    await host.shutdown()
                    throw CLIError("no periodic advertising from \(known.map(\.description).joined(separator: ", ")) heard within \(secondsText(within))")
                }
            } else {
                let found = try await host.central.first(matching: filter, announcingPeriodicAdvertising: sid.map(UInt8.init), within: cliDuration(seconds: within),
                                                         phys: phys)
                guard let found else {
                    await host.shutdown()
                    let who = name.map { "a device named \($0)" } ?? addresses.joined(separator: ", ")
                    throw CLIError("no periodic advertising from \(who)\(sid.map { " (SID \($0))" } ?? "") heard within \(secondsText(within))")
                }
                sync = try await host.central.synchronize(to: found, within: cliDuration(seconds: within), timeout: .milliseconds(syncTimeout))
            }
            let intervalMS = sync.interval / .microseconds(1) / 1000
            announce(json: json, [("event", .string("synchronized")), ("address", .string(sync.advertiser.description)),
                                  ("address_type", .string(sync.advertiserAddressType.description)), ("sid", .int(Int(sync.sid))),
                                  ("interval_ms", .double(intervalMS))],
                     "following \(sync.advertiser) (SID \(sync.sid)), a packet every \(intervalMS) ms; Ctrl-C stops")
            let printer = Task { () -> String in
                do {
                    for try await p in sync.advertisements {
                        print(json ? Self.json(p, sync).rendered : Self.text(p))
                        fflush(nil)
                    }
                    return "stopped"
                } catch {
                    return "lost"
                }
            }
            // Until --duration passes, Ctrl-C, or the train is lost.
            await withTaskGroup(of: Void.self) { g in
                g.addTask { await Interrupt.sleep(for: cliDuration(seconds: duration)) }
                g.addTask { _ = await printer.value }
                await g.next()
                g.cancelAll()
                // The printer ends with the stream.
                try? await sync.terminate()
            }
            let reason = await printer.value
            let dropped = sync.advertisements.dropped.count
            withExtendedLifetime(scan) {}
            await host.shutdown()
            if json {
                emit(.object([("event", .string("sync_ended")), ("reason", .string(reason)), ("dropped", .int(dropped))]))
            } else {
                note(reason == "lost" ? "the controller lost the train" : "stopped following the train")
            }
        } catch let e as CLIError {
            await host.close()
            throw e
        } catch {
            await host.close()
            throw CLIError("sync failed: \(error)")
        }
    }

    static func json(_ p: PeriodicAdvertisement, _ s: PeriodicAdvertisingSync) -> JSONValue {
        var o: [(String, JSONValue)] = [("event", .string("periodic_advertisement")), ("address", .string(s.advertiser.description)),
                                        ("sid", .int(Int(s.sid))), ("rssi", p.rssi.map { .int(Int($0)) } ?? .null),
                                        ("truncated", .bool(p.isTruncated)), ("data", .string(p.raw.hexString))]
        if let t = p.txPower { o.append(("tx_power", .int(Int(t)))) }
        return .object(o + Scan.dataFields(p.data))
    }

    static func text(_ p: PeriodicAdvertisement) -> String {
        var parts = ["\(p.raw.count) bytes", p.rssi.map { "\($0) dBm" } ?? "rssi n/a"]
        if p.isTruncated { parts.append("truncated") }
        parts += Scan.dataText(p.data)
        if p.data.localName == nil, p.data.manufacturerData.isEmpty, p.data.serviceUUIDs.isEmpty { parts.append(p.raw.hexString) }
        return parts.joined(separator: "  ")
    }
}

extension Central {
    /// Scans until a device matching `filter` announces periodic advertising (with
    /// `sid`, if given) within `limit`.
    func first(matching filter: ScanFilter, announcingPeriodicAdvertising sid: UInt8?, within limit: Duration,
               phys: Set<PHY>) async throws -> ScanResult? {
        let results = try await scan(filter: filter, active: false, phys: phys, capacity: 64)
        return await firstElement(results.filter {
            $0.advertisement.periodicAdvertisingInterval != nil && (sid == nil || $0.advertisement.advertisingSID == sid)
        }, within: limit, on: host.loop)
    }
}
