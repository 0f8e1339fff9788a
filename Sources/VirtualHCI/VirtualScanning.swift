// The virtual controller as a scanner (Core Specification v5.4, Vol 4, Part E,
// §7.8.10–§7.8.11, §7.8.64–§7.8.65; Vol 6, Part B, §4.3.3): what it hears of the
// others' advertising (on the primary PHYs it scans, through its Filter Accept List
// when its filter policy says so, directed advertising only when it is the target),
// and the reports it sends its host: legacy ones for legacy PDUs, extended ones in
// pieces of 229 octets, scan responses to an active scan, duplicates filtered when asked.

import HCI

extension VirtualController {
    /// LE Set Scan Enable or its extended form: scanning on or off, reporting with the
    /// events of the command's kind; advertising already on air is heard at once.
    func setScanning(_ op: HCIOpcode, _ on: Bool, filterDuplicates: Bool, extended: Bool) async {
        let starting = on && !scanning
        scanning = on
        extendedScan = extended
        self.filterDuplicates = filterDuplicates
        if starting { seen.removeAll() }
        complete(op)
        if starting { await radio?.scanningStarted(self) }
    }

    /// Whether directed advertising is for this controller (its public or random address).
    func isTarget(_ b: AirAdvertisement) -> Bool { b.isHeard(by: address) || randomAddress.map(b.isHeard(by:)) == true }

    /// A scanner hears `broadcasts`: legacy scanning reports legacy PDUs only;
    /// extended scanning reports everything, extended data in pieces; through the
    /// Filter Accept List, only its advertisers' (Vol 6, Part B, §4.3.3).
    func hear(_ broadcasts: [AirAdvertisement], rssi: Int8) {
        guard scanning else { return }
        // Only what comes on a PHY it scans: reports, and the sets a pending sync looks for.
        let onItsPHYs = broadcasts.filter(scansPHY(of:))
        if extendedScan { establish(from: onItsPHYs) }
        for b in onItsPHYs where isTarget(b) && (scanningFilterPolicy & 1 == 0 || listsAdvertiser(b)) {
            if extendedScan {
                reportExtended(b, rssi: rssi)
            } else if b.legacyPDUs {
                if firstTime(ReportedPDU(b, scanResponse: false)) {
                    emit(.le(.advertisingReport(LEAdvertisingReport(reports: [
                        .init(eventType: b.legacyReportType, addressType: b.addressType, address: b.address, data: b.data, rssi: rssi)]))))
                }
                if activeScan, answersScanRequest(b), firstTime(ReportedPDU(b, scanResponse: true)) {
                    emit(.le(.advertisingReport(LEAdvertisingReport(reports: [
                        .init(eventType: 4, addressType: b.addressType, address: b.address, data: b.scanResponse, rssi: rssi)]))))
                }
            }
        }
    }

    /// Whether this scanner listens on the primary PHY `b` comes on.
    func scansPHY(of b: AirAdvertisement) -> Bool { scanningPHYs & AirAdvertisement.bit(b.primaryPHY) != 0 }

    /// Whether the Filter Accept List has `b`'s advertiser.
    func listsAdvertiser(_ b: AirAdvertisement) -> Bool {
        filterAcceptList.contains(FilterAcceptListEntry(type: b.addressType.rawValue & 1, address: b.address))
    }

    /// Whether `b`'s advertiser answers this scanner's scan request (its filter policy
    /// may take only the scanners on its Filter Accept List).
    func answersScanRequest(_ b: AirAdvertisement) -> Bool {
        let me = scanningAddressType.rawValue & 1 == 1 ? (randomAddress ?? address, AddressType.random) : (address, .public)
        return b.answersScanRequest(from: me.0, type: me.1)
    }

    /// False when duplicate filtering already reported `key`.
    func firstTime(_ key: ReportedPDU) -> Bool {
        if filterDuplicates, seen.contains(key) { return false }
        seen.insert(key)
        return true
    }

    /// The most data one LE Extended Advertising Report carries: 255 octets of event
    /// parameters less the subevent code, Num_Reports and a report's 24 fixed octets.
    static let extendedReportDataLength = 229

    /// LE Extended Advertising Reports for `b` (and its scan response to an active
    /// scanner): data longer than one report goes in pieces, each but the last with
    /// data status "incomplete, more data to come" (§7.7.65.13).
    func reportExtended(_ b: AirAdvertisement, rssi: Int8) {
        func send(_ data: [UInt8], type: UInt16) {
            var offset = 0
            repeat {
                let end = Swift.min(data.count, offset + Self.extendedReportDataLength)
                let more: UInt16 = end < data.count ? 1 << 5 : 0
                emit(.le(.extendedAdvertisingReport(LEExtendedAdvertisingReport(reports: [.init(
                    eventType: type | more, addressType: b.addressType, address: b.address, primaryPHY: b.primaryPHY, secondaryPHY: b.secondaryPHY,
                    advertisingSID: b.sid, txPower: b.properties & 0x40 != 0 ? b.txPower : 127, rssi: rssi,
                    periodicAdvertisingInterval: b.periodicInterval, directAddressType: .public, directAddress: b.target ?? .zero, data: Array(data[offset..<end]))]))))
                offset = end
            } while offset < data.count
        }
        if firstTime(ReportedPDU(b, scanResponse: false)) { send(b.data, type: b.extendedReportType) }
        if activeScan, answersScanRequest(b), firstTime(ReportedPDU(b, scanResponse: true)) { send(b.scanResponse, type: b.extendedReportType | 0x08) }
    }
}

/// What duplicate filtering tells apart, as Rootcanal does (the whole PDU): the
/// advertiser, its set, advertisement or scan response, and the data, so data that
/// changes is reported again (as the new DID in a real
/// controller's ADI makes it, for extended advertising).
struct ReportedPDU: Hashable {
    var address: BluetoothAddress
    var sid: UInt8
    var scanResponse: Bool
    var data: [UInt8]

    init(_ b: AirAdvertisement, scanResponse: Bool) {
        address = b.address
        sid = b.sid
        self.scanResponse = scanResponse
        data = scanResponse ? b.scanResponse : b.data
    }
}
