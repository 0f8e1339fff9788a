// btctl scan and btctl advertise (docs/btctl.md).

import ArgumentParser
import BLE
import Foundation
import GAP
import HCI
import Snoop

struct Scan: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Scan for advertisements and print each one, decoded.")
    @OptionGroup var options: ControllerOptions
    @Option(parsing: .unconditional, help: "Seconds to scan (0.1 to 86400).") var duration: Double = 10
    @Flag(help: "Passive scanning (no scan requests, so no scan responses).") var passive = false
    @Flag(help: "Report every advertisement, not only the first per device.") var duplicates = false
    @Option(help: "Only devices advertising this name (repeatable).") var name: [String] = []
    @Option(help: "Only devices listing this service UUID (repeatable).") var service: [String] = []
    @Option(help: "Only this address (repeatable).") var address: [String] = []
    @Option(parsing: .unconditional, help: "Only reports at or above this RSSI (dBm, -127 to 20), e.g. --min-rssi -70.") var minRssi: Int?
    @Option(name: .customLong("accept"), help: ArgumentHelp(
        "Only this device, filtered by the controller (repeatable; XX:XX:XX:XX:XX:XX[/random], a bonded device by its identity address): the controller's Filter Accept List, with Scanning_Filter_Policy 1.",
        valueName: "ADDRESS")) var accept: [DeviceAddress] = []
    @Option(help: ArgumentHelp("Scan this PHY (repeatable; 1m or coded, default 1m): coded hears long-range advertising (needs a controller with extended advertising).",
                               valueName: "PHY")) var phy: [PHYName] = []

    @Option(parsing: .unconditional, help: "Listen for this long of every --interval (ms, 2.5 to 10240; default 30).") var window: Double?
    @Option(parsing: .unconditional, help: "How often the controller listens (ms, 2.5 to 10240; default 60).") var interval: Double?

    /// The PHYs `--phy` names, LE 1M when it names none.
    var phys: Set<PHY> { phy.isEmpty ? [.le1M] : Set(phy.map(\.phy)) }

    /// `--interval` and `--window` over the host's default.
    var timing: ScanTiming {
        ScanTiming(interval: interval.map { .microseconds(Int64(($0 * 1000).rounded())) } ?? ScanTiming.standard.interval,
                   window: window.map { .microseconds(Int64(($0 * 1000).rounded())) } ?? ScanTiming.standard.window)
    }

    func validate() throws {
        guard duration.isFinite, (0.1...86_400).contains(duration) else { throw ValidationError("--duration must be between 0.1 and 86400 seconds, not \(duration)") }
        try validatePrimaryPHYs(phys, "--phy")
        for (name, v) in [("--interval", interval), ("--window", window)] {
            if let v, !(v.isFinite && (2.5...10_240).contains(v)) { throw ValidationError("\(name) must be between 2.5 and 10240 ms, not \(v)") }
        }
        if timing.window > timing.interval { throw ValidationError("--window (\(timing.window)) must be at most --interval (\(timing.interval))") }
        for s in service where BluetoothUUID(s) == nil { throw ValidationError("--service: bad UUID '\(s)' (16-bit like 180F, 32-bit, or 128-bit)") }
        for a in address where BluetoothAddress(a) == nil { throw ValidationError("--address: bad address '\(a)' (XX:XX:XX:XX:XX:XX)") }
        if let m = minRssi, !(-127...20).contains(m) { throw ValidationError("--min-rssi must be between -127 and 20 dBm, not \(m)") }
    }

    func run() async throws {
        let (host, writer) = try await options.openHost()
        defer { writer?.close() }
        let json = options.json
        let summary: ScanSummary
        let dropped: Int
        var lost: String?
        do {
            try await host.start()
            let filter = ScanFilter(names: name, serviceUUIDs: service.compactMap(BluetoothUUID.init), addresses: address.compactMap(BluetoothAddress.init),
                                    minimumRSSI: minRssi.map { Int8($0) })
            // Filters apply to each device's advertisement and scan response together.
            if !accept.isEmpty { try await host.setAcceptList(accept) }
            let results = try await host.central.scan(filter: filter, active: !passive, filterDuplicates: !duplicates, acceptListOnly: !accept.isEmpty,
                                                      phys: phys, timing: timing)
            if !json {
                let on = phys == [.le1M] ? "" : " on \(phys.sorted { $0.rawValue < $1.rawValue }.map(\.description).joined(separator: " and "))"
                let through = on + (accept.isEmpty ? "" : ", through the accept list (\(accept.map(\.description).joined(separator: ", ")))")
                note("scanning \(passive ? "passively" : "actively") for \(secondsText(duration))\(duplicates ? ", every report" : ", first report per device")\(name.isEmpty && service.isEmpty && address.isEmpty && minRssi == nil ? "" : ", filtered")\(through); Ctrl-C stops")
            }
            let printer = Task {
                var summary = ScanSummary()
                var live = LiveStatus(json: json)
                for await r in results {
                    summary.add(r)
                    live.willPrint()
                    print(json ? Self.json(r.advertisement).rendered : Self.text(r.advertisement))
                    fflush(nil)
                    live.update("\(summary.reports) reports from \(summary.devices.count) devices")
                }
                live.clear()
                return summary
            }
            lost = await Interrupt.sleep(for: cliDuration(seconds: duration), orUntilTheTransportOf: host)
            printer.cancel()
            summary = await printer.value
            dropped = results.dropped.count
            await host.shutdown()
        } catch {
            await host.close()
            throw CLIError("scan failed: \(error)")
        }
        if json {
            emit(summary.json(dropped: dropped))
        } else {
            summary.printTable()
            if dropped > 0 { note("\(dropped) advertisements dropped (output too slow)") }
        }
        if let lost, !Interrupt.requested { throw CLIError(ControllerWentAway(why: lost).description) }
    }

    static func fields(_ a: Advertisement) -> [(String, JSONValue)] {
        var o: [(String, JSONValue)] = [
            ("event", .string(a.isScanResponse ? "scan_response" : "advertisement")),
            ("address", .string(a.address.description)), ("address_type", .string(a.addressType.description)), ("rssi", .int(Int(a.rssi))),
            ("event_type", .int(Int(a.eventType))), ("connectable", .bool(a.isConnectable)), ("scan_response", .bool(a.isScanResponse)),
        ]
        if let sid = a.advertisingSID { o.append(("sid", .int(Int(sid)))) }
        if let p = a.primaryPHY { o.append(("primary_phy", .string(PHY(rawValue: p).description))) }
        if let p = a.secondaryPHY { o.append(("secondary_phy", .string(PHY(rawValue: p).description))) }
        if let i = a.periodicAdvertisingInterval { o.append(("periodic_interval_ms", .double(Double(i) * 1.25))) }
        return o + dataFields(a.data, distance: a.estimatedMetres)
    }

    /// The decoded AD structures of `d` as JSON fields (`distance`: the estimate from RSSI, when there is one).
    static func dataFields(_ d: AdvertisingData, distance: Double? = nil) -> [(String, JSONValue)] {
        var o: [(String, JSONValue)] = []
        if let n = d.localName { o.append(("name", .string(n))) }
        if !d.serviceUUIDs.isEmpty {
            o.append(("services", .array(d.serviceUUIDs.map { .string($0.description) })))
            let names = d.serviceUUIDs.compactMap(\.name)
            if !names.isEmpty { o.append(("service_names", .array(names.map { .string($0) }))) }
        }
        if let t = d.txPowerLevel { o.append(("tx_power", .int(Int(t)))) }
        if !d.manufacturerData.isEmpty {
            o.append(("manufacturer_data", .array(d.manufacturerData.map { .object([("company", .int(Int($0.companyIdentifier)))] + (AssignedNumbers.companyName($0.companyIdentifier).map { [("company_name", .string($0))] } ?? []) + [("data", .string($0.data.hexString))]) })))
        }
        if let m = distance { o.append(("distance_m", .double((m * 10).rounded() / 10))) }
        if let b = d.iBeacon {
            o.append(("ibeacon", .object([("uuid", .string(b.uuid.description)), ("major", .int(Int(b.major))), ("minor", .int(Int(b.minor))), ("measured_power", .int(Int(b.measuredPower)))])))
        }
        for e in d.eddystone {
            switch e {
            case let .url(tx, url): o.append(("eddystone_url", .object([("url", .string(url)), ("tx_power", .int(Int(tx)))])))
            case let .uid(tx, ns, inst): o.append(("eddystone_uid", .object([("namespace", .string(ns.hexString)), ("instance", .string(inst.hexString)), ("tx_power", .int(Int(tx)))])))
            case let .tlm(b, t, n, s): o.append(("eddystone_tlm", .object([("battery_mv", .int(Int(b))), ("temperature_c", t.map { .double(Double($0)) } ?? .null), ("adv_count", .int(Int(n))), ("uptime_ds", .int(Int(s)))])))
            case let .eid(tx, id): o.append(("eddystone_eid", .object([("eid", .string(id.hexString)), ("tx_power", .int(Int(tx)))])))
            }
        }
        if let damage = d.damage { o.append(("ad_error", .string(damage.description))) }
        return o
    }

    static func json(_ a: Advertisement) -> JSONValue { .object(fields(a)) }

    static func text(_ a: Advertisement) -> String {
        var parts = ["\(a.address)\(a.addressType == .random ? "/random" : "")", "\(a.rssi) dBm", a.isScanResponse ? "scan-rsp" : a.isDirected ? "directed" : (a.isConnectable ? "connectable" : "non-connectable")]
        if a.primaryPHY == PHY.leCoded.rawValue { parts.append("LE Coded") }
        parts += dataText(a.data, distance: a.estimatedMetres)
        if let i = a.periodicAdvertisingInterval { parts.append("periodic every \(Double(i) * 1.25) ms (SID \(a.advertisingSID ?? 0))") }
        return parts.joined(separator: "  ")
    }

    /// The decoded AD structures of `d` for a text line.
    static func dataText(_ d: AdvertisingData, distance: Double? = nil) -> [String] {
        var parts: [String] = []
        if let n = d.localName { parts.append("\"\(n)\"") }
        if !d.serviceUUIDs.isEmpty { parts.append("services " + d.serviceUUIDs.map(named).joined(separator: ",")) }
        if let t = d.txPowerLevel { parts.append("tx \(t) dBm") }
        for m in d.manufacturerData {
            parts.append("mfr 0x\(hex4(m.companyIdentifier))\(AssignedNumbers.companyName(m.companyIdentifier).map { " (\($0))" } ?? ""):\(m.data.hexString)")
        }
        if let m = distance { parts.append(String(format: "~%.1f m", m)) }
        if let b = d.iBeacon { parts.append("iBeacon \(b.uuid) \(b.major)/\(b.minor)") }
        for e in d.eddystone { if case let .url(_, u) = e { parts.append("Eddystone \(u)") } else { parts.append("Eddystone \(e)") } }
        return parts
    }
}

/// What `scan` heard, per device, for its closing table.
struct ScanSummary {
    struct Device {
        var address: String
        var name: String?
        var reports = 0
        var lastRSSI: Int8 = 0
        var bestRSSI: Int8 = -128
    }
    private(set) var devices: [String: Device] = [:]
    private(set) var order: [String] = []
    private(set) var reports = 0

    mutating func add(_ r: ScanResult) {
        let key = "\(r.address)\(r.addressType == .random ? "/random" : "")"
        if devices[key] == nil { order.append(key) }
        var d = devices[key] ?? Device(address: key)
        d.name = r.name ?? d.name
        d.reports += 1
        d.lastRSSI = r.rssi
        d.bestRSSI = Swift.max(d.bestRSSI, r.rssi)
        devices[key] = d
        reports += 1
    }

    func printTable() {
        guard !devices.isEmpty else {
            note("nothing heard")
            return
        }
        print("")
        print("\(devices.count) device\(devices.count == 1 ? "" : "s"), \(reports) report\(reports == 1 ? "" : "s"):")
        print("  " + "address".padding(toLength: 25, withPad: " ", startingAt: 0) + "reports  best dBm  last dBm  name")
        for key in order.sorted(by: { (devices[$0]?.bestRSSI ?? 0) > (devices[$1]?.bestRSSI ?? 0) }) {
            guard let d = devices[key] else { continue }
            print("  " + d.address.padding(toLength: 25, withPad: " ", startingAt: 0) + pad(d.reports, 7) + "  " + pad(Int(d.bestRSSI), 8) + "  " + pad(Int(d.lastRSSI), 8) + "  " + (d.name ?? ""))
        }
    }

    private func pad(_ n: Int, _ width: Int) -> String {
        let s = String(n)
        return String(repeating: " ", count: Swift.max(0, width - s.count)) + s
    }

    func json(dropped: Int) -> JSONValue {
        .object([("event", .string("summary")), ("reports", .int(reports)), ("dropped", .int(dropped)),
                 ("devices", .array(order.compactMap { devices[$0] }.map { d in
                     .object([("address", .string(d.address)), ("name", d.name.map { .string($0) } ?? .null), ("reports", .int(d.reports)),
                              ("best_rssi", .int(Int(d.bestRSSI))), ("last_rssi", .int(Int(d.lastRSSI)))])
                 }))])
    }
}

struct Advertise: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Advertise a name, services, manufacturer data, an iBeacon or an Eddystone URL.")
    @OptionGroup var options: ControllerOptions
    @Option(help: "Local name (in the scan response when the advertisement is full).") var name: String?
    @Option(help: "Service UUID to list (repeatable).") var service: [String] = []
    @Option(help: "Manufacturer data as COMPANY:HEX, e.g. 004c:0102.") var manufacturer: String?
    @Option(help: "iBeacon as UUID:MAJOR:MINOR:POWER.") var ibeacon: String?
    @Option(help: "Eddystone-URL to advertise.") var eddystoneUrl: String?
    @Option(parsing: .unconditional, help: "TX Power Level to advertise (dBm, -127 to 20), e.g. --tx-power -8.") var txPower: Int?
    @Flag(help: "Non-connectable advertising.") var nonConnectable = false
    @Option(name: .customLong("set"), help: ArgumentHelp(
        "Also advertise this in an advertising set of its own (repeatable; needs a controller with extended advertising): comma-separated name=TEXT, service=UUID (repeatable), manufacturer=COMPANY:HEX, interval=MS (20 to 10240), connectable, duration=MS (10 to 655350: the set ends then), events=N (1 to 255: the set ends after N advertising events), periodic=COMPANY:HEX (also a periodic advertising train carrying this manufacturer data; not with connectable), periodic-interval=MS (7.5 to 81918.75, default 100), phy=1m|2m|coded, directed=ADDRESS (for that device alone, connectable; its data in extended PDUs).",
        valueName: "SPEC")) var sets: [String] = []
    @Option(parsing: .unconditional, help: "Seconds to advertise (0.1 to 86400).") var duration: Double = 30
    @Option(name: .customLong("accept"), help: ArgumentHelp(
        "Let only this device connect (repeatable; XX:XX:XX:XX:XX:XX[/random]): the controller's Filter Accept List, with every advertisement's Advertising_Filter_Policy.",
        valueName: "ADDRESS")) var accept: [DeviceAddress] = []
    @Flag(help: "With --accept: only those devices get the scan response too.") var acceptScans = false
    @Option(help: ArgumentHelp("The advertisement's PHYs: 1m (default), coded (long range: LE Coded for the advertisement and its data), or 2m (its data on LE 2M); other than 1m needs a controller with extended advertising, and only extended scanners hear it.",
                               valueName: "PHY")) var phy: PHYName = .le1m
    @Option(help: ArgumentHelp("Directed advertising to this device alone (XX:XX:XX:XX:XX:XX[/random]): only it hears the advertisement, and only it may connect. ADV_DIRECT_IND carries no data, so with nothing to advertise it goes out as that; what is given to advertise needs a controller with extended advertising (extended PDUs, no flags, no scan response).",
                               valueName: "ADDRESS")) var directed: DeviceAddress?
    @Flag(help: "With --directed: high duty cycle, for the fastest reconnection; it lasts 1.28 s at most (then 'stopped advertising: its duration elapsed') and carries no data.")
    var highDuty = false

    /// What `--accept` and `--accept-scans` make each advertisement answer alone.
    var filter: AdvertisingFilter { accept.isEmpty ? [] : acceptScans ? [.connections, .scanRequests] : .connections }

    func validate() throws {
        guard duration.isFinite, (0.1...86_400).contains(duration) else { throw ValidationError("--duration must be between 0.1 and 86400 seconds, not \(duration)") }
        if acceptScans, accept.isEmpty { throw ValidationError("--accept-scans needs the devices: --accept ADDRESS") }
        if let t = txPower, !(-127...20).contains(t) { throw ValidationError("--tx-power must be between -127 and 20 dBm, not \(t)") }
        if highDuty, directed == nil { throw ValidationError("--high-duty is for directed advertising: give --directed ADDRESS") }
        if directed != nil, nonConnectable { throw ValidationError("--directed advertising is connectable: it asks one device to connect") }
        if highDuty, try !payloads().0.bytes.isEmpty { throw ValidationError("--high-duty advertising carries no data: give nothing to advertise") }
        _ = try payloads()
        for s in sets { _ = try AdvertisingSetSpec(parsing: s) }
    }

    /// Packs the pieces greedily: beacons and flags into the advertisement, then
    /// services, TX power and the name wherever they fit (advertisement first, then the
    /// scan response); a name that fits neither is sent shortened. Directed: everything
    /// in the advertisement (extended PDUs hold it), no flags, nothing when nothing is given.
    func payloads() throws -> (AdvertisingData, AdvertisingData?) {
        var d = AdvertisingData()
        var rsp = AdvertisingData()
        d.flags = directed == nil ? 0x06 : nil
        if let m = manufacturer {
            guard let md = AdvertisingSetSpec.manufacturerData(m) else { throw ValidationError("--manufacturer must be COMPANY:HEX") }
            d.manufacturerData.append(md)
        }
        if let i = ibeacon {
            let p = i.split(separator: ":")
            guard p.count == 4, let u = BluetoothUUID(String(p[0])), let ma = UInt16(p[1]), let mi = UInt16(p[2]), let pw = Int8(p[3]) else {
                throw ValidationError("--ibeacon must be UUID:MAJOR:MINOR:POWER")
            }
            d.flags = directed == nil ? 0x04 : nil
            d.manufacturerData.append(IBeacon(uuid: u, major: ma, minor: mi, measuredPower: pw).manufacturerData)
        }
        if let u = eddystoneUrl {
            guard let sd = Eddystone.url(txPower: Int8(clamping: txPower ?? -20), url: u).serviceData else {
                throw ValidationError("--eddystone-url must start with http:// or https:// and encode to at most 17 bytes")
            }
            d.serviceUUIDs.append(Eddystone.serviceUUID)
            d.serviceData.append(sd)
        }
        _ = try d.encoded()  // the mandatory pieces alone must fit
        func place(_ change: (inout AdvertisingData) -> Void) -> Bool {
            var t = d
            change(&t)
            if t.bytes.count <= (directed == nil ? 31 : LESetExtendedAdvertisingParameters.maximumDataLength(properties: 0x05)) { d = t; return true }
            var r = rsp
            change(&r)
            if r.bytes.count <= 31 { rsp = r; return true }
            return false
        }
        var uuids: [BluetoothUUID] = []
        for s in service {
            guard let u = BluetoothUUID(s) else { throw ValidationError("bad UUID '\(s)'") }
            uuids.append(u)
        }
        if !uuids.isEmpty, !place({ $0.serviceUUIDs += uuids }) { throw CLIError("the service UUIDs do not fit in 31 bytes with the rest") }
        if let t = txPower, !place({ $0.txPowerLevel = Int8(clamping: t) }) { throw CLIError("the TX power does not fit with the rest") }
        if let name, !place({ $0.localName = name }) {
            // Shortened Local Name: as much as fits in the scan response.
            let room = 31 - rsp.bytes.count - 2
            guard room > 0 else { throw CLIError("no room left for the name") }
            rsp.localName = String(decoding: Array(name.utf8.prefix(room)), as: UTF8.self)
            rsp.nameIsShortened = true
        }
        return (d, rsp.bytes.isEmpty ? nil : rsp)
    }

    func run() async throws {
        let (d, rsp) = try payloads()
        let (host, writer) = try await options.openHost()
        defer { writer?.close() }
        do {
            try await host.start()
            // Sets given a duration or an event limit end by themselves, and a central's
            // connection stops the set it connected to until the link ends: each is reported.
            let ends = host.peripheral.events()
            let endReporter = Task {
                for await e in ends {
                    switch e {
                    case let .advertisingEnded(set, reason): reportEnd(set: set.handle, reason)
                    case let .advertisingConnected(set, central): reportConnection(set: set.handle, central)
                    default: break
                    }
                }
            }
            defer { endReporter.cancel() }
            if !accept.isEmpty { try await host.setAcceptList(accept) }
            try await host.peripheral.startAdvertising(d, scanResponse: rsp, connectable: !nonConnectable, acceptListOnly: filter, phys: phy.advertising,
                                                       directedTo: directed.map { DirectedTarget($0, highDutyCycle: highDuty) })
            func report(set: UInt8, _ d: AdvertisingData, _ rsp: AdvertisingData?, connectable: Bool,
                        periodic: (data: AdvertisingData, intervalMilliseconds: Double)? = nil, phys: AdvertisingPHYs,
                        directed: DeviceAddress? = nil, highDuty: Bool = false) {
                if options.json {
                    var fields: [(String, JSONValue)] = [("event", .string("advertising")), ("set", .int(Int(set))), ("connectable", .bool(connectable)),
                                                         ("data", .string(d.bytes.hexString)), ("scan_response", .string(rsp?.bytes.hexString ?? ""))]
                    if let periodic { fields += [("periodic", .string(periodic.data.bytes.hexString)), ("periodic_interval_ms", .double(periodic.intervalMilliseconds))] }
                    if !accept.isEmpty { fields += [("accept_list", .array(accept.map { .string($0.description) })), ("accept_scans", .bool(acceptScans))] }
                    if phys != .le1M { fields += [("primary_phy", .string(phys.primary.description)), ("secondary_phy", .string(phys.secondary.description))] }
                    if let directed { fields += [("directed", .string(directed.description)), ("high_duty", .bool(highDuty))] }
                    emit(.object(fields))
                } else {
                    print("advertising \(d.bytes.count) bytes\(rsp.map { " + \($0.bytes.count) bytes scan response" } ?? "")"
                          + "\(set == 0 ? "" : " in set \(set)")\(connectable ? "" : ", not connectable")\(phys == .le1M ? "" : ", on \(phys)")"
                          + "\(periodic.map { ", with \($0.data.bytes.count) bytes of periodic advertising every \($0.intervalMilliseconds) ms" } ?? "")"
                          + "\(accept.isEmpty ? "" : ", to \(accept.map(\.description).joined(separator: ", ")) alone\(acceptScans ? " (scan response too)" : "")")"
                          + "\(directed.map { ", directed to \($0)\(highDuty ? " (high duty cycle)" : "")" } ?? "") for \(duration) s")
                }
            }
            report(set: 0, d, rsp, connectable: !nonConnectable, phys: phy.advertising, directed: directed, highDuty: highDuty)
            for s in sets {
                let spec = try AdvertisingSetSpec(parsing: s)
                let set = try await host.peripheral.addAdvertisingSet(spec.data, connectable: spec.connectable, intervalMilliseconds: spec.intervalMilliseconds,
                                                                      duration: spec.duration, maximumEvents: spec.maximumEvents, acceptListOnly: filter,
                                                                      phys: spec.phys, directedTo: spec.directed.map { DirectedTarget($0) })
                if let p = spec.periodic {
                    try await host.peripheral.startPeriodicAdvertising(on: set, data: p, intervalMilliseconds: spec.periodicIntervalMilliseconds)
                }
                report(set: set.handle, spec.data, nil, connectable: spec.connectable,
                       periodic: spec.periodic.map { ($0, spec.periodicIntervalMilliseconds) }, phys: spec.phys, directed: spec.directed)
            }
            fflush(nil)
            let lost = await Interrupt.sleep(for: cliDuration(seconds: duration), orUntilTheTransportOf: host)
            endReporter.cancel()
            await host.shutdown()
            if options.json { emit(.object([("event", .string("stopped"))])) }
            if let lost, !Interrupt.requested { throw ControllerWentAway(why: lost) }
        } catch let e as ControllerWentAway {
            throw CLIError(e.description)
        } catch let e as AdvertisingDataError {
            await host.close()
            throw CLIError("\(e)")
        } catch {
            await host.close()
            throw CLIError("advertise failed: \(error)")
        }
    }

    /// One set a limit ended: an `advertising_ended` line.
    func reportConnection(set: UInt8, _ c: Connection) {
        if options.json {
            emit(.object([("event", .string("connected")), ("set", .int(Int(set))), ("peer", .string(c.peer.description)),
                          ("peer_type", .string(c.peerType.description)), ("handle", .int(Int(c.handle)))]))
        } else {
            print("\(c.peer)\(c.peerType == .random ? "/random" : "") connected to set \(set) (handle 0x\(hex4(c.handle))); the set advertises again when it leaves")
        }
        fflush(nil)
    }

    func reportEnd(set: UInt8, _ reason: AdvertisingEndReason) {
        var fields: [(String, JSONValue)] = [("event", .string("advertising_ended")), ("set", .int(Int(set)))]
        let text: String
        switch reason {
        case .durationElapsed:
            fields.append(("reason", .string("duration")))
            text = "its duration elapsed"
        case let .eventLimitReached(n):
            fields += [("reason", .string("event_limit")), ("events", .int(n))]
            text = "it sent its \(n) advertising events"
        case let .controller(status):
            fields += [("reason", .string("controller")), ("status", .int(Int(status.rawValue)))]
            text = "the controller ended it: \(status)"
        }
        if options.json { emit(.object(fields)) } else { print("set \(set) stopped advertising: \(text)") }
        fflush(nil)
    }
}

/// One `btctl advertise --set` argument: comma-separated name=TEXT, service=UUID
/// (repeatable), manufacturer=COMPANY:HEX, interval=MS, connectable, duration=MS, events=N,
/// periodic=COMPANY:HEX, periodic-interval=MS, phy=1m|2m|coded.
struct AdvertisingSetSpec {
    var data = AdvertisingData()
    var connectable = false
    var intervalMilliseconds = 100.0
    var duration: Duration?
    var maximumEvents: Int?
    /// A periodic advertising train on the set, carrying this manufacturer data.
    var periodic: AdvertisingData?
    var periodicIntervalMilliseconds = 100.0
    var phys = AdvertisingPHYs.le1M
    /// Directed advertising to this device alone (its data in extended PDUs).
    var directed: DeviceAddress?

    init(parsing spec: String) throws {
        data.flags = 0x06
        for item in spec.split(separator: ",", omittingEmptySubsequences: true) {
            let kv = item.split(separator: "=", maxSplits: 1).map(String.init)
            switch (kv[0], kv.count == 2 ? kv[1] : nil) {
            case ("connectable", nil):
                connectable = true
            case let ("name", v?):
                data.localName = v
            case let ("service", v?):
                guard let u = BluetoothUUID(v) else { throw ValidationError("--set: bad UUID '\(v)'") }
                data.serviceUUIDs.append(u)
            case let ("manufacturer", v?):
                guard let md = Self.manufacturerData(v) else { throw ValidationError("--set: manufacturer must be COMPANY:HEX, not '\(v)'") }
                data.manufacturerData.append(md)
            case let ("interval", v?):
                guard let ms = Double(v), ms.isFinite, (20...10_240).contains(ms) else {
                    throw ValidationError("--set: interval must be between 20 and 10240 ms, not '\(v)'")
                }
                intervalMilliseconds = ms
            case let ("duration", v?):
                guard let ms = Int(v), (10...655_350).contains(ms) else {
                    throw ValidationError("--set: duration must be between 10 and 655350 ms, not '\(v)'")
                }
                duration = .milliseconds(ms)
            case let ("events", v?):
                guard let n = Int(v), (1...255).contains(n) else { throw ValidationError("--set: events must be between 1 and 255, not '\(v)'") }
                maximumEvents = n
            case let ("periodic", v?):
                guard let md = Self.manufacturerData(v) else { throw ValidationError("--set: periodic must be COMPANY:HEX, not '\(v)'") }
                var p = periodic ?? AdvertisingData()
                p.manufacturerData.append(md)
                periodic = p
            case let ("periodic-interval", v?):
                guard let ms = Double(v), ms.isFinite, (7.5...81_918.75).contains(ms) else {
                    throw ValidationError("--set: periodic-interval must be between 7.5 and 81918.75 ms, not '\(v)'")
                }
                periodicIntervalMilliseconds = ms
            case let ("phy", v?):
                guard let p = PHYName(rawValue: v) else { throw ValidationError("--set: phy must be 1m, 2m or coded, not '\(v)'") }
                phys = p.advertising
            case let ("directed", v?):
                guard let a = DeviceAddress(argument: v) else { throw ValidationError("--set: directed must be XX:XX:XX:XX:XX:XX[/random], not '\(v)'") }
                directed = a
                connectable = true
            default:
                throw ValidationError("--set: '\(item)' is not one of name=TEXT, service=UUID, manufacturer=COMPANY:HEX, interval=MS, connectable, duration=MS, events=N, periodic=COMPANY:HEX, periodic-interval=MS, phy=1m|2m|coded, directed=ADDRESS")
            }
        }
        if periodic != nil, connectable {
            throw ValidationError("--set '\(spec)': periodic advertising needs a set that is not connectable\(directed != nil ? " (directed is)" : "")")
        }
        guard data.localName != nil || !data.serviceUUIDs.isEmpty || !data.manufacturerData.isEmpty else {
            throw ValidationError("--set '\(spec)' advertises nothing: give it a name, a service or manufacturer data")
        }
        do { _ = try data.encoded(limit: 1650) } catch { throw ValidationError("--set '\(spec)': \(error)") }
    }

    /// COMPANY:HEX (`--manufacturer`, `--set manufacturer=`), e.g. 004c:0102.
    static func manufacturerData(_ text: String) -> AdvertisingData.ManufacturerData? {
        let p = text.split(separator: ":", maxSplits: 1)
        guard p.count == 2, let c = UInt16(hexDigits: p[0]), let b = [UInt8](hex: String(p[1])) else { return nil }
        return .init(companyIdentifier: c, data: b)
    }
}

/// Refuses LE 2M where a scan or a connection looks for advertising: on 1m or coded
/// (the primary PHYs a device advertises on) only.
func validatePrimaryPHYs(_ phys: Set<PHY>, _ option: String) throws {
    if phys.contains(.le2M) { throw ValidationError("\(option): 1m or coded (the PHYs a device advertises on), not 2m") }
}

/// A PHY as `--phy` and `--set phy=` name it.
enum PHYName: String, ExpressibleByArgument, CaseIterable {
    case le1m = "1m", le2m = "2m", coded

    var phy: PHY {
        switch self {
        case .le1m: return .le1M
        case .le2m: return .le2M
        case .coded: return .leCoded
        }
    }

    /// What an advertisement on it uses: LE Coded both ways for long range; LE 2M for
    /// its data (the primary PHY is LE 1M or LE Coded).
    var advertising: AdvertisingPHYs {
        switch self {
        case .le1m: return .le1M
        case .le2m: return AdvertisingPHYs(primary: .le1M, secondary: .le2M)
        case .coded: return .longRange
        }
    }
}
