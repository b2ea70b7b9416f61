//! The after-dispatch policies in use ([`HookSet`], [`crate::hooks`]), in the order they hear
//! each event. This type owns the hooks and calls one at a time with what it may see of the core
//! ([`super::view::View`]); carrying out what each asks for is the core's step
//! ([`super::lifecycle::Step::notify`]), since an effect can change any owner.

use crate::hooks::hook::{CoreView, Effects, Hook, HookReport};
use crate::ids::{NodeId, ObjectId};

/// The hooks in use, in the registry's order.
pub(super) struct HookSet {
    hooks: Vec<Box<dyn Hook>>,
}

impl HookSet {
    /// The hooks `hooks`, heard in this order.
    pub(super) fn new(hooks: Vec<Box<dyn Hook>>) -> HookSet {
        HookSet { hooks }
    }

    /// How many hooks are in use.
    pub(super) fn len(&self) -> usize {
        self.hooks.len()
    }

    /// Tell hook `i` of an event (`event`), showing it `view`; returns what it asks for.
    pub(super) fn call(
        &mut self,
        i: usize,
        view: &dyn CoreView,
        event: &mut impl FnMut(&mut dyn Hook, &dyn CoreView, &mut Effects),
    ) -> Effects {
        let mut fx = Effects::default();
        event(self.hooks[i].as_mut(), view, &mut fx);
        fx
    }

    /// What every hook in use tells of itself.
    pub(super) fn report(&self) -> HookReport {
        let mut out = HookReport::default();
        for h in &self.hooks {
            h.report(&mut out);
        }
        out
    }

    /// The hook of type `T`, if it is in use (the hand-off's cache model, which is not a
    /// statistic but a view a driver reads).
    pub(super) fn find<T: Hook>(&self) -> Option<&T> {
        self.hooks
            .iter()
            .find_map(|h| (&**h as &dyn std::any::Any).downcast_ref::<T>())
    }

    /// Whether a hook keeps an idle `node` from being released.
    pub(super) fn keeps_node(&self, node: NodeId) -> bool {
        self.hooks.iter().any(|h| h.keeps_node(node))
    }

    /// The transfers the hooks have under way (each counted in the copies' in-transfer counts).
    pub(super) fn in_transfer(&self) -> impl Iterator<Item = (NodeId, ObjectId)> + '_ {
        self.hooks.iter().flat_map(|h| h.in_transfer())
    }

    /// Each hook's own invariants, against what it sees of the core.
    pub(super) fn check(&self, view: &dyn CoreView) -> Result<(), String> {
        for h in &self.hooks {
            h.check(view)?;
        }
        Ok(())
    }
}
