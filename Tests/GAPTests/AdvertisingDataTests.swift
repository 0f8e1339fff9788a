import BLETesting
import HCI
import Testing
@testable import GAP

@Suite(.timeLimit(.minutes(3)))
struct AdvertisingDataTests {
    @Test func parsesTheCommonTypes() throws {
        let bytes = [UInt8](hex: """
            020106 0709616c61726d21 050312180f18 110763d3b2f5ffd29e8e4347a4c5f5fd2c9a 020ac4 03194104
            05120600 2800 051609180102 06ff4c00abcdef 021c00 031a2000
            """)!
        let ad = AdvertisingData(parsing: bytes)
        #expect(ad.damage == nil)
        #expect(ad.flags == 0x06)
        #expect(ad.localName == "alarm!" && !ad.nameIsShortened)
        #expect(ad.serviceUUIDs.prefix(2) == [BluetoothUUID(0x1812), BluetoothUUID(0x180F)])
        #expect(ad.serviceUUIDs.count == 3)
        #expect(ad.txPowerLevel == -60)
        #expect(ad.appearance == 0x0441)
        #expect(ad.connectionIntervalRange == 6...40)
        #expect(ad.serviceData == [.init(uuid: BluetoothUUID(0x1809), data: [1, 2])])
        #expect(ad.manufacturerData == [.init(companyIdentifier: 0x004C, data: [0xAB, 0xCD, 0xEF])])
        #expect(ad.leRole == 0 && ad.advertisingInterval == 0x20)
        // Building gives the same structures back.
        #expect(AdvertisingData(parsing: ad.bytes) == ad)
    }

    @Test func overrunIsReportedNotTrusted() {
        let ad = AdvertisingData(parsing: [0x02, 0x01, 0x06, 0x09, 0x09, 0x61, 0x62])
        #expect(ad.flags == 0x06)
        #expect(ad.localName == nil)
        #expect(ad.damage == .truncated(what: "AD structure at offset 3", offset: 3, needed: 9, available: 3))
    }

    @Test func tooLongSaysHowMuchFits() {
        var ad = AdvertisingData()
        ad.localName = String(repeating: "n", count: 40)
        #expect(throws: AdvertisingDataError.tooLong(length: 42, limit: 31)) { try ad.encoded() }
        #expect("\(AdvertisingDataError.tooLong(length: 42, limit: 31))".contains("remove 11 bytes"))
    }

    /// A GATT server's advertisement: services first, the name where it still fits,
    /// else in the scan response; byte for byte (Supplement Part A §1.1, §1.2).
    @Test func aServerAdvertisesItsServicesAndItsName() throws {
        let uart = try #require(BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E"))
        // Both lists and a short name fit in 31 bytes: 3 + 4 + 18 + 5.
        let (a, r) = AdvertisingData.server(name: "bat", serviceUUIDs: [BluetoothUUID(0x180F), uart])
        #expect(a.bytes == [UInt8](hex: "020106 0409626174 03030f18 1107 9ecadc240ee5a9e093f3a3b5 01 00 40 6e")!)
        #expect(r.bytes.isEmpty)
        // The name no longer fits next to them: complete in the scan response.
        let (b, s) = AdvertisingData.server(name: "btctl-battery", serviceUUIDs: [BluetoothUUID(0x180F), uart])
        #expect(b.localName == nil && b.serviceUUIDsComplete && b.bytes.count == 25)
        #expect(s.bytes == [UInt8](hex: "0e09")! + Array("btctl-battery".utf8))
        // Three 128-bit services: one fits; the list says it is incomplete (type 0x06).
        let many = (1...3).map { try! BluetoothUUID(littleEndian: [UInt8](repeating: UInt8($0), count: 16)) }
        let (c, _) = AdvertisingData.server(name: "x", serviceUUIDs: many + [BluetoothUUID(0x1812), BluetoothUUID(0x1812)])
        #expect(c.serviceUUIDs == [BluetoothUUID(0x1812), many[0]] && !c.serviceUUIDsComplete)
        #expect(c.structures.map(\.type) == [0x01, 0x09, 0x02, 0x06])
        // A name longer than 29 bytes is shortened on a character boundary (é is 2 bytes).
        let long = String(repeating: "a", count: 28) + "éb"
        let (_, t) = AdvertisingData.server(name: long, serviceUUIDs: [])
        #expect(t.nameIsShortened && t.localName == String(repeating: "a", count: 28) && t.bytes.count == 30)
        let (d, e) = AdvertisingData.server(name: "", serviceUUIDs: [])
        #expect(d.bytes == [2, 1, 6] && e.bytes.isEmpty)
    }

    @Test func uriWithSchemeCode() {
        var ad = AdvertisingData()
        ad.uri = "https://example.org"
        #expect(ad.structures == [ADStructure(type: 0x24, data: [0xC2, 0x17] + Array("//example.org".utf8))])
        #expect(AdvertisingData(parsing: ad.bytes).uri == "https://example.org")
    }

    @Test func iBeaconFromTheWellKnownExample() throws {
        // 4C00 02 15 E2C56DB5-DFFB-48D2-B060-D0F5A71096E0 0001 0002 C5
        let m = AdvertisingData.ManufacturerData(companyIdentifier: 0x004C, data: [UInt8](hex: "0215e2c56db5dffb48d2b060d0f5a71096e000010002c5")!)
        let b = try #require(IBeacon(m))
        #expect(b.uuid.description == "E2C56DB5-DFFB-48D2-B060-D0F5A71096E0")
        #expect(b.major == 1 && b.minor == 2 && b.measuredPower == -59)
        #expect(b.manufacturerData == m)
        #expect(IBeacon(.init(companyIdentifier: 0x004C, data: [0x02, 0x15, 1])) == nil)
    }

    @Test func eddystoneFrames() throws {
        let url = Eddystone.url(txPower: -20, url: "http://google.com")
        let sd = try #require(url.serviceData)
        #expect(sd.data == [0x10, 0xEC, 0x02] + Array("google".utf8) + [0x07])
        #expect(Eddystone(sd) == url)
        let uid = Eddystone.uid(txPower: -10, namespace: Array(0..<10), instance: Array(10..<16))
        #expect(Eddystone(try #require(uid.serviceData)) == uid)
        let tlm = Eddystone.tlm(batteryMillivolts: 3000, temperature: 22.5, advertisingCount: 1000, uptimeDeciseconds: 36000)
        let tlmData = try #require(tlm.serviceData)
        #expect(Array(tlmData.data[4...5]) == [0x16, 0x80])  // 22.5 °C in 8.8 fixed point
        #expect(Eddystone(tlmData) == tlm)
        let eid = Eddystone.eid(txPower: 0, identifier: [1, 2, 3, 4, 5, 6, 7, 8])
        #expect(Eddystone(try #require(eid.serviceData)) == eid)
        #expect(Eddystone.url(txPower: 0, url: "ftp://x").serviceData == nil)
        var ad = AdvertisingData()
        ad.serviceData = [sd, tlmData]
        #expect(AdvertisingData(parsing: ad.bytes).eddystone == [url, tlm])
    }
}

@Suite(.timeLimit(.minutes(3)))
struct DistanceTests {
    @Test func pathLossModelInvertsTheVirtualRadios() async throws {
        // The virtual radio reports -61 dBm at 10 m for a 0 dBm advertiser; the estimate gives it back.
        #expect(abs(DistanceEstimate.metres(rssi: -61, txPowerLevel: 0) - 10) < 0.01)
        #expect(abs(DistanceEstimate.metres(rssi: -59, rssiAtOneMetre: -59) - 1) < 0.001)
        #expect(DistanceEstimate.proximity(metres: 0.3) == .immediate)
        #expect(DistanceEstimate.proximity(metres: 10) == .far)
    }

    @Test func filterSmoothsAndIgnoresUnavailable() {
        var f = RSSIFilter(alpha: 0.5)
        #expect(f.add(-60) == -60)
        #expect(f.add(-70) == -65)
        #expect(f.add(127) == -65)
        #expect(f.count == 2)
    }
}
