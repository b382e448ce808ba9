//! The registry of named caches: listing, resize by name, clear_all, shrink_all, weak holding,
//! the maintenance task. Each test uses its own names (tests share the process-wide registry).

use std::time::Duration;

use ttl_lru::{Cache, ManualClock, RegistryError, registry};

/// clear_all and shrink_all touch every registered cache: run these tests one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn named(name: &str, capacity: u64) -> Cache<u64, u64> {
    Cache::builder(capacity).name(name).shards(1).build()
}

fn info(name: &str) -> Option<registry::CacheInfo> {
    registry::caches().into_iter().find(|c| c.name == name)
}

#[test]
fn named_caches_are_listed_and_held_weakly() {
    let _serial = SERIAL.blocking_lock();
    let c = named("reg-list", 10);
    c.insert(1, 1, Duration::MAX).unwrap();
    let i = info("reg-list").unwrap();
    assert_eq!((i.capacity, i.len, i.weight), (10, 1, 1));
    assert_eq!(c.name(), Some("reg-list"));
    drop(c);
    assert!(
        info("reg-list").is_none(),
        "a dropped cache disappears from the registry"
    );
    let unnamed: Cache<u64, u64> = Cache::new(10);
    assert_eq!(unnamed.name(), None);
}

#[test]
fn set_capacity_by_name_shrinks() {
    let _serial = SERIAL.blocking_lock();
    let c = named("reg-resize", 100);
    for k in 0..100 {
        c.insert(k, k, Duration::MAX).unwrap();
    }
    assert_eq!(registry::set_capacity("reg-resize", 10), Ok(90));
    assert_eq!(c.capacity(), 10);
    assert_eq!(c.len(), 10);
    assert_eq!(
        registry::set_capacity("reg-missing", 1),
        Err(RegistryError::NotFound("reg-missing".into()))
    );
}

#[test]
fn shrink_all_trims_every_cache_proportionally() {
    let _serial = SERIAL.blocking_lock();
    let a = named("reg-shrink-a", 1000);
    let b = named("reg-shrink-b", 1000);
    for k in 0..1000 {
        a.insert(k, k, Duration::MAX).unwrap();
        if k < 200 {
            b.insert(k, k, Duration::MAX).unwrap();
        }
    }
    assert!(registry::shrink_all(0.5).unwrap() >= 600);
    assert_eq!(a.len(), 500);
    assert_eq!(b.len(), 100);
    assert_eq!(a.capacity(), 1000, "capacity unchanged");
    assert_eq!(
        registry::shrink_all(1.5),
        Err(RegistryError::BadFraction(1.5))
    );
    assert!(registry::shrink_all(f64::NAN).is_err());
}

#[test]
fn clear_all_clears_every_cache() {
    let _serial = SERIAL.blocking_lock();
    let a = named("reg-purge-a", 10);
    let b: Cache<String, String> = Cache::builder(10).name("reg-purge-b").build();
    a.insert(1, 1, Duration::MAX).unwrap();
    b.insert("x".into(), "y".into(), Duration::MAX).unwrap();
    assert!(registry::clear_all() >= 2);
    assert!(a.is_empty());
    assert!(b.is_empty());
}

#[tokio::test(start_paused = true)]
async fn maintenance_task_purges_expired_entries() {
    let _serial = SERIAL.lock().await;
    let clock = ManualClock::new();
    let c: Cache<u64, u64> = Cache::builder(10)
        .name("reg-maint")
        .clock(clock.clone())
        .build();
    c.insert(1, 1, Duration::from_secs(1)).unwrap();
    c.insert(2, 2, Duration::MAX).unwrap();
    assert_eq!(
        registry::spawn_maintenance(Duration::ZERO).unwrap_err(),
        RegistryError::ZeroInterval
    );
    let task = registry::spawn_maintenance(Duration::from_secs(5)).unwrap();
    clock.advance(Duration::from_secs(2));
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(c.len(), 1);
    assert_eq!(c.get(&2), Some(2));
    task.abort();
}

#[test]
fn maintenance_needs_a_runtime() {
    let _serial = SERIAL.blocking_lock();
    assert_eq!(
        registry::spawn_maintenance(Duration::from_secs(1)).unwrap_err(),
        RegistryError::NoRuntime
    );
}
